#pragma once
// The three formats of a profile's rows: Profiler::table (a fixed-width
// table and a summary line, like key_averages().table()), csv and json.

#include <cstddef>
#include <string>
#include <vector>

#include "profile_row.hpp"

namespace xtgrad::detail {

// What the formats print besides the rows.
struct ProfileTotals {
  std::size_t steps = 0;    // steps marked
  double step_seconds = 0;  // their wall time
  double self_seconds = 0;  // the sum of all self times
};

std::string profile_table(const std::vector<ProfileRow>& rows, const ProfileTotals& totals);
std::string profile_csv(const std::vector<ProfileRow>& rows);
std::string profile_json(const std::vector<ProfileRow>& rows, const ProfileTotals& totals);

}  // namespace xtgrad::detail
