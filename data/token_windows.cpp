// next_token_windows and random_token_windows (token_windows.hpp).

#include "token_windows.hpp"

#include <algorithm>

#include "../engine/errors.hpp"
#include "counter_key.hpp"

namespace xtgrad {

TokenWindows next_token_windows(const std::int64_t* ids, std::size_t length,
                                const std::vector<std::size_t>& starts, std::size_t T) {
  const detail::Check check("next_token_windows");
  check.argument(T > 0, "T", "is 0, expected a positive window length");
  for (std::size_t r = 0; r < starts.size(); ++r)
    check.argument(starts[r] < length && length - starts[r] >= T + 1, "starts", "has window ", r,
                   " from ", starts[r], ", which needs ", T + 1, " tokens of a sequence of ",
                   length);
  TokenWindows batch{Indices::from_shape({starts.size(), T}),
                     Indices::from_shape({starts.size() * T})};
  for (std::size_t r = 0; r < starts.size(); ++r) {
    std::copy_n(ids + starts[r], T, batch.inputs.data() + r * T);
    std::copy_n(ids + starts[r] + 1, T, batch.targets.data() + r * T);
  }
  return batch;
}

TokenWindows random_token_windows(const std::int64_t* ids, std::size_t length, std::size_t T,
                                  std::uint64_t seed, std::uint64_t step, std::size_t first,
                                  std::size_t count) {
  const detail::Check check("random_token_windows");
  check.argument(T > 0, "T", "is 0, expected a positive window length");
  check.argument(length > T, "length", "is ", length, ", expected at least T + 1 = ", T + 1);
  constexpr std::uint64_t k_window_stream = 0x77696e646f77ULL;  // "window"
  std::vector<std::size_t> starts;
  for (std::size_t r = first; r < first + count; ++r)
    starts.push_back(
        static_cast<std::size_t>(counter_key(seed, k_window_stream, step, r) % (length - T)));
  return next_token_windows(ids, length, starts, T);
}

}  // namespace xtgrad
