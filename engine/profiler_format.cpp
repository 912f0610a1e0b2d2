// Profiler::table, csv and json: the same rows in three formats.
#include "profiler_format.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>

namespace xtgrad::detail {

namespace {

// "12.345ms", as torch.autograd.profiler prints times.
std::string time_str(double seconds) {
  char buffer[32];
  if (seconds >= 1.0)
    std::snprintf(buffer, sizeof buffer, "%.3fs", seconds);
  else if (seconds >= 1e-3)
    std::snprintf(buffer, sizeof buffer, "%.3fms", seconds * 1e3);
  else
    std::snprintf(buffer, sizeof buffer, "%.3fus", seconds * 1e6);
  return buffer;
}

// "1.07 G": three significant digits with an SI prefix; "-" for zero (not counted).
std::string si_str(double v) {
  if (v <= 0) return "-";
  static constexpr const char* prefixes[] = {"", "k", "M", "G", "T", "P"};
  std::size_t p = 0;
  while (v >= 1000.0 && p + 1 < std::size(prefixes)) {
    v /= 1000.0;
    ++p;
  }
  char buffer[32];
  std::snprintf(buffer, sizeof buffer,
                v >= 100  ? "%.0f %s"
                : v >= 10 ? "%.1f %s"
                          : "%.2f %s",
                v, prefixes[p]);
  return buffer;
}

std::string rate_str(double v) {
  if (v <= 0) return "-";
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.2f", v);
  return buffer;
}

std::string percent_str(double share) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.2f%%", share * 100.0);
  return buffer;
}

const char* kind_str(ProfileRow::Kind kind) {
  switch (kind) {
    case ProfileRow::Kind::backward:
      return "backward";
    case ProfileRow::Kind::region:
      return "region";
    case ProfileRow::Kind::outside:
      return "outside";
    case ProfileRow::Kind::forward:
      break;
  }
  return "forward";
}

// A JSON string literal (names are op literals and region names: escape all).
std::string json_str(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buffer[8];
      std::snprintf(buffer, sizeof buffer, "\\u%04x", c);
      out += buffer;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// A CSV field (RFC 4180): quoted when it holds a comma, a quote or a newline.
std::string csv_str(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (const char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string number(double v) {
  std::ostringstream s;
  s.precision(9);
  s << v;
  return s.str();
}

}  // namespace

std::string profile_table(const std::vector<ProfileRow>& all, const ProfileTotals& totals) {
  const char* headers[] = {"Name",  "Calls", "Self",    "Total", "Avg",
                           "Share", "FLOPs", "GFLOP/s", "Bytes", "GB/s"};
  std::vector<std::vector<std::string>> cells;
  for (const ProfileRow& r : all)
    cells.push_back({r.name, std::to_string(r.calls), time_str(r.self_seconds),
                     time_str(r.total_seconds), time_str(r.average_seconds()), percent_str(r.share),
                     si_str(r.flops), rate_str(r.gflops_per_second()),
                     si_str(r.bytes) + (r.bytes > 0 ? "B" : ""), rate_str(r.gbytes_per_second())});
  std::size_t width[std::size(headers)];
  for (std::size_t c = 0; c < std::size(headers); ++c) {
    width[c] = std::string(headers[c]).size();
    for (const auto& row : cells) width[c] = std::max(width[c], row[c].size());
  }
  std::ostringstream out;
  auto rule = [&] {
    for (std::size_t c = 0; c < std::size(headers); ++c)
      out << (c ? "  " : "") << std::string(width[c], '-');
    out << '\n';
  };
  auto line = [&](const auto& row) {
    for (std::size_t c = 0; c < std::size(headers); ++c) {
      const std::string text = row[c];
      const std::string pad(width[c] - text.size(), ' ');
      out << (c ? "  " : "") << (c == 0 ? text + pad : pad + text);  // names left, numbers right
    }
    out << '\n';
  };
  rule();
  line(headers);
  rule();
  for (const auto& row : cells) line(row);
  rule();
  out << "Self time total: " << time_str(totals.self_seconds);
  if (totals.steps)
    out << " of " << time_str(totals.step_seconds) << " wall over " << totals.steps
        << (totals.steps == 1 ? " step" : " steps") << " (share: of the steps' wall time)";
  else
    out << " (share: of the self time total)";
  out << '\n';
  return out.str();
}

std::string profile_csv(const std::vector<ProfileRow>& all) {
  std::ostringstream out;
  out << "name,kind,calls,self_seconds,total_seconds,average_seconds,share,flops,"
         "gflops_per_second,bytes,gbytes_per_second\n";
  for (const ProfileRow& r : all)
    out << csv_str(r.name) << ',' << kind_str(r.kind) << ',' << r.calls << ','
        << number(r.self_seconds) << ',' << number(r.total_seconds) << ','
        << number(r.average_seconds()) << ',' << number(r.share) << ',' << number(r.flops) << ','
        << number(r.gflops_per_second()) << ',' << number(r.bytes) << ','
        << number(r.gbytes_per_second()) << '\n';
  return out.str();
}

std::string profile_json(const std::vector<ProfileRow>& all, const ProfileTotals& totals) {
  std::ostringstream out;
  out << "{\n  \"steps\": " << totals.steps
      << ",\n  \"step_seconds\": " << number(totals.step_seconds)
      << ",\n  \"self_seconds\": " << number(totals.self_seconds) << ",\n  \"rows\": [";
  for (std::size_t i = 0; i < all.size(); ++i) {
    const ProfileRow& r = all[i];
    out << (i ? "," : "") << "\n    {\"name\": " << json_str(r.name) << ", \"kind\": \""
        << kind_str(r.kind) << "\", \"calls\": " << r.calls
        << ", \"self_seconds\": " << number(r.self_seconds)
        << ", \"total_seconds\": " << number(r.total_seconds)
        << ", \"average_seconds\": " << number(r.average_seconds())
        << ", \"share\": " << number(r.share) << ", \"flops\": " << number(r.flops)
        << ", \"gflops_per_second\": " << number(r.gflops_per_second())
        << ", \"bytes\": " << number(r.bytes)
        << ", \"gbytes_per_second\": " << number(r.gbytes_per_second()) << "}";
  }
  out << (all.empty() ? "" : "\n  ") << "]\n}\n";
  return out.str();
}

}  // namespace xtgrad::detail
