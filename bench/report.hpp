#pragma once
// The table of bench_xtgrad: its rows, and the four ways it is written out
// (a table on the terminal, CSV, JSON, and Markdown for docs/benchmarks.md).

#include <iosfwd>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace xtgrad::bench {

inline constexpr double k_nan = std::numeric_limits<double>::quiet_NaN();

// One line of the table. `floor` is the GEMM floor (ffn) or the copy floor
// (activation); NaN where a column does not apply. The ratios of timed rows
// are medians of per-round ratios (paired_ratio), not ratios of the medians.
struct Row {
  std::string section;
  std::string name;
  std::string unit;
  double xtgrad = k_nan;
  double floor = k_nan;
  double libtorch = k_nan;
  double xtgrad_over_floor = k_nan;
  double libtorch_over_floor = k_nan;
  double xtgrad_over_libtorch = k_nan;
};

// The run's settings, in order: (name, value).
using Meta = std::vector<std::pair<std::string, std::string>>;

void print_table(const std::vector<Row>& rows, std::ostream& out);
// Each throws std::runtime_error when the file cannot be written.
void write_csv(const std::vector<Row>& rows, const std::string& path);
void write_json(const std::vector<Row>& rows, const Meta& meta, const std::string& path);
// The settings as a list, then one table per section.
void write_markdown(const std::vector<Row>& rows, const Meta& meta, const std::string& path);

}  // namespace xtgrad::bench
