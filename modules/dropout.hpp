#pragma once
// Dropout<T>(p = 0.5, seed = 0): torch.nn.Dropout(p). In training, each
// element is zeroed with probability p and the rest scaled by 1 / (1 - p)
// (ops/dropout.hpp); in eval mode, and inside infer, it is the identity and
// returns x itself. As in torch, a tape that does not record (NoGradGuard)
// does not change that: only the mode does. No parameters.
//
// Randomness: the mask of a training forward is the one of
// DropoutKey{seed(), step(), 0}, and every training forward with p > 0 then
// advances step() by one, so each step draws a new mask. step() and set_step() let a
// resumed run continue with the masks it would have drawn. Two Dropout
// modules with the same seed draw the same masks for inputs of one shape: the
// constructor that takes a Generator draws the seed from it (when p > 0;
// with p == 0 it draws nothing and the seed is 0), so the modules of a model
// built from one Generator get distinct seeds.
//
// Data parallelism: a process that runs rows [r, r + b) of a global batch
// sets row_offset() = r (distributed/data_parallel.hpp does it for a whole
// model). The mask of a forward is then keyed from element r * (elements
// per row) on, so the rows get exactly the masks they would get in one
// process running the whole batch; a row is one index of the input's first
// axis. The default 0 is the one-process mask.
//
// Copying a Dropout copies its seed and step: the copy repeats the masks.

#include <cstdint>
#include <optional>

#include "../engine/ops/dropout.hpp"
#include "init.hpp"
#include "module.hpp"

namespace xtgrad {

template <class T>
class Dropout : public Module<T> {
 public:
  // std::invalid_argument naming 'p' unless 0 <= p <= 1.
  explicit Dropout(double p = 0.5, std::uint64_t seed = 0);
  Dropout(double p, Generator& generator);

  // x of any shape -> the same shape.
  Var<T> forward(const Var<T>& x) override;
  ModuleConfig config() const override;

  // In a training forward (training mode, not inside infer) with p > 0:
  // advances step() and returns the key of this forward's mask, for a tensor
  // with `elements_per_row` elements per row (detail::elements_per_row; the
  // key's first element is row_offset() * elements_per_row). Otherwise
  // nothing, step() unchanged, so a module whose dropouts have p == 0 is
  // only read by forward and can serve several threads at once. For modules
  // that apply the dropout inside a fused op (the FFN hidden dropout).
  std::optional<DropoutKey> next_key(std::uint64_t elements_per_row);

  double p() const { return p_; }
  std::uint64_t seed() const { return seed_; }
  std::uint64_t step() const { return step_; }
  void set_step(std::uint64_t step) { step_ = step; }
  std::uint64_t row_offset() const { return row_offset_; }
  void set_row_offset(std::uint64_t row_offset) { row_offset_ = row_offset; }

 protected:
  void collect_parameters(const std::string&, typename Module<T>::NamedParameters&) override {}

 private:
  double p_;
  std::uint64_t seed_;
  std::uint64_t step_ = 0;
  std::uint64_t row_offset_ = 0;
};

namespace detail {
// The seed a module constructor draws from `generator` for its dropout.
inline std::uint64_t draw_seed(Generator& generator) {
  return generator();
}
// Elements per row (one index of the first axis) of a tensor shaped like
// `shape` with its last axis replaced by `last`: the product of shape[1 ..
// dim - 2] times last; `last` for a 1-D shape (one row), 1 for a 0-d one.
// Dropout on x uses (x.shape(), x.shape().back()); a fused hidden dropout
// of width H on the rows of x uses (x.shape(), H).
inline std::uint64_t elements_per_row(const Shape& shape, std::size_t last) {
  if (shape.empty()) return 1;
  std::uint64_t n = last;
  for (std::size_t d = 1; d + 1 < shape.size(); ++d) n *= shape[d];
  return n;
}
// std::invalid_argument from `owner` naming `arg` unless 0 <= p <= 1.
void check_probability(const char* owner, const char* arg, double p);
}  // namespace detail

extern template class Dropout<float>;
extern template class Dropout<double>;

}  // namespace xtgrad
