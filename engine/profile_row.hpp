#pragma once
// ProfileRow: one line of a Profiler's profile (profiler.hpp), what its
// table, csv and json formats print (profiler_format.hpp).

#include <cstddef>
#include <string>

namespace xtgrad {

// One line of the profile.
struct ProfileRow {
  enum class Kind { forward, backward, region, outside };
  std::string name;  // "linear", "linear.backward", a region's name, "[outside ops]"
  Kind kind = Kind::forward;
  std::size_t calls = 0;
  double self_seconds = 0;
  double total_seconds = 0;  // self plus what was timed inside it
  double share = 0;          // self over the steps' wall time (or over all self time)
  double flops = 0;          // counted floating-point operations; 0: not a GEMM op
  double bytes = 0;          // modelled memory traffic; 0: not an elementwise op

  double average_seconds() const { return calls ? total_seconds / double(calls) : 0.0; }
  double gflops_per_second() const { return self_seconds > 0 ? flops / self_seconds / 1e9 : 0.0; }
  double gbytes_per_second() const { return self_seconds > 0 ? bytes / self_seconds / 1e9 : 0.0; }
};

}  // namespace xtgrad
