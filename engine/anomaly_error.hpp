#pragma once
// AnomalyError: what anomaly mode (Tape::set_detect_anomaly, tape.hpp) throws.

#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

namespace xtgrad {

// Thrown in anomaly mode (Tape::set_detect_anomaly) for the first non-finite
// value or gradient. what() is one readable paragraph; the fields let a test
// or a training loop react to it.
class AnomalyError : public std::runtime_error {
 public:
  enum class Phase { forward, backward };

  AnomalyError(const std::string& what, Phase phase, std::string op, std::size_t node,
               std::size_t gradient_node)
      : std::runtime_error(what),
        phase_(phase),
        op_(std::move(op)),
        node_(node),
        gradient_node_(gradient_node) {}

  // forward: the node's value is non-finite; backward: the backward rule of
  // `node` wrote a non-finite gradient into node `gradient_node()`.
  Phase phase() const { return phase_; }
  // The op of `node` ("linear", "leaf", "param", ...).
  const std::string& op() const { return op_; }
  std::size_t node() const { return node_; }
  // backward: the parent whose gradient became non-finite; forward: node().
  std::size_t gradient_node() const { return gradient_node_; }

 private:
  Phase phase_;
  std::string op_;
  std::size_t node_;
  std::size_t gradient_node_;
};

}  // namespace xtgrad
