// The routing kernels of the mixture-of-experts op (kernels/moe_kernels.hpp):
// torch.topk's choice of experts and the counting sort by expert.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include "moe_kernels.hpp"
#include "parallel.hpp"

namespace xtgrad::detail {

template <class T>
void moe_top_k(const T* p, std::size_t n, std::size_t e, std::size_t k, std::size_t* expert) {
  // torch's elem_t is (accscalar_t, int64_t); for float and double on the CPU
  // accscalar_t is double, which orders float values exactly as float does.
  using Elem = std::pair<double, std::int64_t>;
  const auto larger = [](const Elem& a, const Elem& b) {
    return (std::isnan(a.first) && !std::isnan(b.first)) || a.first > b.first;
  };
  const bool use_partial_sort = k * 64 <= e;
  parallel_for_rows(
      n, std::max<std::size_t>(1, k_parallel_heavy / std::max<std::size_t>(e, 1)),
      [&](std::size_t begin, std::size_t end) {
        std::vector<Elem> queue(e);
        for (std::size_t i = begin; i < end; ++i) {
          for (std::size_t j = 0; j < e; ++j)
            queue[j] = {static_cast<double>(p[i * e + j]), static_cast<std::int64_t>(j)};
          const auto first = queue.begin();
          const auto kth = first + static_cast<std::ptrdiff_t>(k);
          if (use_partial_sort) {
            std::partial_sort(first, kth, queue.end(), larger);
          } else {
            std::nth_element(first, kth - 1, queue.end(), larger);
            std::sort(first, kth - 1, larger);
          }
          for (std::size_t s = 0; s < k; ++s)
            expert[i * k + s] = static_cast<std::size_t>(queue[s].second);
        }
      });
}

void moe_sort(MoeRouting& r, const std::vector<std::size_t>& capacities) {
  const std::size_t choices = r.tokens * r.k, e_count = r.experts;
  r.routed.assign(e_count, 0);
  for (std::size_t c = 0; c < choices; ++c) ++r.routed[r.expert[c]];
  r.counts.resize(e_count);
  r.offsets.assign(e_count + 1, 0);
  for (std::size_t e = 0; e < e_count; ++e) {
    r.counts[e] = std::min(r.routed[e], capacities[e]);
    r.offsets[e + 1] = r.offsets[e] + r.counts[e];
  }
  // Stable: choices in increasing c, so in token order within an expert (a
  // token chooses an expert at most once); past counts[e] they are dropped.
  std::vector<std::size_t> next(r.offsets.begin(), r.offsets.end() - 1);
  r.source.resize(r.rows());
  r.row_of.assign(choices, MoeRouting::k_dropped);
  for (std::size_t c = 0; c < choices; ++c) {
    const std::size_t e = r.expert[c];
    if (next[e] == r.offsets[e + 1]) continue;
    r.source[next[e]] = c;
    r.row_of[c] = next[e]++;
  }
}

void moe_sort(MoeRouting& r) {
  moe_sort(r, std::vector<std::size_t>(r.experts, r.capacity));
}

template void moe_top_k(const float*, std::size_t, std::size_t, std::size_t, std::size_t*);
template void moe_top_k(const double*, std::size_t, std::size_t, std::size_t, std::size_t*);

}  // namespace xtgrad::detail
