#pragma once
// bench_hvp's LibTorch side (its own translation unit: LibTorch headers are
// slow to compile and not warning-clean under -Wpedantic).

#include <cstddef>
#include <functional>
#include <vector>

namespace xtgrad::bench {

// The MLP of bench_hvp in plain row-major floats: x [tokens, widths[0]],
// target [tokens, widths.back()], and per layer l weight [widths[l + 1],
// widths[l]] and bias [widths[l + 1]] (params and v alternate weight, bias).
struct HvpProblem {
  std::size_t tokens = 0;
  std::vector<std::size_t> widths;
  std::vector<float> x, target;
  std::vector<std::vector<float>> params, v;
};

// One Hessian-vector product per call, by LibTorch's double backward
// (torch::autograd::grad with create_graph, then grad of <g, v>); the last
// result, flattened per parameter, goes to *result.
std::function<void()> libtorch_hvp(const HvpProblem& problem,
                                   std::vector<std::vector<float>>* result);

}  // namespace xtgrad::bench
