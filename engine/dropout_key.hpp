#pragma once
// DropoutKey: which random numbers a dropout draws (ops/dropout.hpp states
// the rule). A header of its own, knowing no tape, so that the kernels that
// draw dropout masks (kernels/dropout_mask.hpp, the fused attention) can name
// it without the op layer above them.

#include <cstdint>

namespace xtgrad {

// Which random numbers a dropout call uses (see ops/dropout.hpp).
struct DropoutKey {
  std::uint64_t seed = 0;           // the run
  std::uint64_t step = 0;           // the training step (or call site within one)
  std::uint64_t first_element = 0;  // the counter of x's element 0
};

}  // namespace xtgrad
