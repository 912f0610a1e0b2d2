#pragma once
// Data-parallel helpers for a model: the row offset of every dropout, and
// the usual training loop's pieces in one place.
//
// set_row_offset(model, r): every Dropout module of `model` (and the hidden
// dropouts of FeedForward, GatedFFN, Mlp and PreNormResidual, which are
// Dropout modules) keys its masks from row r on (Dropout::set_row_offset):
// with r = Shard::row_offset each rank's rows get the masks that one
// process running the whole global batch would give them. Call it before
// every forward whose slice starts at another row (the last, shorter batch).

#include <cstdint>

#include "../modules/dropout.hpp"
#include "../modules/module.hpp"

namespace xtgrad::distributed {

template <class T>
void set_row_offset(Module<T>& model, std::uint64_t row_offset) {
  for (auto& [name, module] : model.named_modules()) {
    (void)name;
    if (auto* dropout = dynamic_cast<Dropout<T>*>(module)) dropout->set_row_offset(row_offset);
  }
}

}  // namespace xtgrad::distributed
