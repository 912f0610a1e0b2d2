#pragma once
// parameter_count(model): how many values a model's parameters hold, as
// sum(p.numel() for p in model.parameters()) in PyTorch, which also counts
// each Parameter once: a weight tied under two names (GPT's lm_head and wte)
// counts once. parameter_count(model, /*trainable_only=*/true) counts the
// parameters that require a gradient, the ones an optimizer updates (LoRA
// freezes the others).

#include <cstddef>
#include <set>

#include "module.hpp"

namespace xtgrad {

template <class T>
std::size_t parameter_count(Module<T>& model, bool trainable_only = false) {
  std::set<const Parameter<T>*> seen;
  std::size_t count = 0;
  for (const Parameter<T>* p : model.parameters())
    if (seen.insert(p).second && (p->requires_grad || !trainable_only)) count += p->value.size();
  return count;
}

}  // namespace xtgrad
