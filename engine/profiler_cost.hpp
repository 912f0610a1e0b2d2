#pragma once
// The profiler's cost model (Profiler::cost_model): the FLOPs and bytes of
// one node, from its and its parents' shapes alone. profiler_cost.cpp states
// the model.

#include <cstddef>
#include <string_view>

namespace xtgrad {

template <class T>
class Tape;

// FLOPs (GEMM and attention ops) and bytes (elementwise ops) of one node,
// forward or backward.
struct ProfileCost {
  double flops = 0;
  double bytes = 0;
};

namespace detail {

// Which formula of the cost model an op's name selects (found once per row).
enum class CostClass { none, gemm, gated_gemm, elementwise, attention };

CostClass cost_class(std::string_view op);

// The cost of node `index` of `tape` by the formula of `c`.
template <class T>
ProfileCost node_cost(CostClass c, const Tape<T>& tape, std::size_t index, bool backward);

extern template ProfileCost node_cost(CostClass, const Tape<float>&, std::size_t, bool);
extern template ProfileCost node_cost(CostClass, const Tape<double>&, std::size_t, bool);

}  // namespace detail

}  // namespace xtgrad
