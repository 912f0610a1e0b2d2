#pragma once
// The matmul precision (matmul_precision.hpp) for one scope: set on entry,
// the previous one restored on exit, so that a test at bf16 leaves the
// process at the precision it found.

#include <xtgrad/engine/matmul_precision.hpp>

namespace xtgrad::testing {

struct PrecisionScope {
  MatmulPrecision before = get_matmul_precision();
  explicit PrecisionScope(MatmulPrecision p) { set_matmul_precision(p); }
  ~PrecisionScope() { set_matmul_precision(before); }
  PrecisionScope(const PrecisionScope&) = delete;
  PrecisionScope& operator=(const PrecisionScope&) = delete;
};

}  // namespace xtgrad::testing
