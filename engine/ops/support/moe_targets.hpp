#pragma once
// What both moe_experts ops (ops/moe.cpp, and with an exchange
// ops/moe_parallel.cpp) read back from the tape: the experts' weights by
// node index, and the gradient targets of their backward.

#include <cstddef>
#include <utility>
#include <vector>

#include "../../kernels/moe_kernels.hpp"
#include "../../tape.hpp"

namespace xtgrad::detail {

// The weights of the experts whose w1, w3, w2 are the nodes w1[e], w3[e], w2[e].
template <class T>
std::vector<MoeExpertWeights<T>> moe_expert_weights(const Tape<T>& t,
                                                    const std::vector<std::size_t>& w1,
                                                    const std::vector<std::size_t>& w3,
                                                    const std::vector<std::size_t>& w2) {
  std::vector<MoeExpertWeights<T>> out(w1.size());
  for (std::size_t e = 0; e < out.size(); ++e)
    out[e] = {t.value(w1[e]).data(), t.value(w3[e]).data(), t.value(w2[e]).data()};
  return out;
}

// The experts' weights read back from the tape and the set over them, for
// one pass of either op; the set refers to the weights, so the two stay
// together and in place (no copies).
template <class T>
struct TapeExpertSet {
  std::vector<MoeExpertWeights<T>> weights;
  MoeExpertSet<T> set;

  TapeExpertSet(const Tape<T>& t, const std::vector<std::size_t>& w1,
                const std::vector<std::size_t>& w3, const std::vector<std::size_t>& w2,
                Activation f, std::size_t c, std::size_t h, const std::vector<std::size_t>& offsets)
      : weights(moe_expert_weights(t, w1, w3, w2)), set{f,       c,       h,
                                                        offsets, weights, k_moe_tile_macs} {}
  TapeExpertSet(const TapeExpertSet&) = delete;
  TapeExpertSet& operator=(const TapeExpertSet&) = delete;
};

// The gradient targets of one backward: one per distinct node, claimed in
// the order asked (grad_slot's rule), so that a node passed in several
// roles shares its target; null for a node that needs no gradient. At most
// `capacity` nodes (the targets never move).
template <class T>
class MoeTargets {
 public:
  MoeTargets(Tape<T>& t, std::size_t capacity) : tape_(t) { targets_.reserve(capacity); }

  MoeGradTarget<T>* operator()(std::size_t node) {
    if (!tape_.requires_grad(node)) return nullptr;
    for (auto& [index, target] : targets_)
      if (index == node) return &target;
    const GradPointer<T> slot = tape_.grad_pointer(node);
    targets_.push_back({node, {slot.data, tape_.value(node).size(), slot.accumulate}});
    return &targets_.back().second;
  }

  // The experts' weights' targets, claimed all w1, then w3, then w2.
  MoeWeightGrads<T> experts(const std::vector<std::size_t>& w1, const std::vector<std::size_t>& w3,
                            const std::vector<std::size_t>& w2) {
    MoeWeightGrads<T> dw;
    for (auto [indices, roles] :
         {std::pair{&w1, &dw.dw1}, std::pair{&w3, &dw.dw3}, std::pair{&w2, &dw.dw2}})
      for (std::size_t index : *indices) roles->push_back((*this)(index));
    return dw;
  }

 private:
  Tape<T>& tape_;
  std::vector<std::pair<std::size_t, MoeGradTarget<T>>> targets_;
};

}  // namespace xtgrad::detail
