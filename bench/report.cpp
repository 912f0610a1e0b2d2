#include "report.hpp"

#include <cmath>
#include <fstream>
#include <iomanip>
#include <ostream>
#include <sstream>
#include <stdexcept>

namespace xtgrad::bench {

namespace {

std::string number(double v, int precision) {
  if (std::isnan(v)) return "-";
  std::ostringstream out;
  out << std::fixed << std::setprecision(precision) << v;
  return out.str();
}

std::string floor_label(const std::string& section) {
  return section == "ffn" || section == "matmul" || section == "attention" ? "GEMM floor"
         : section == "activation" || section == "rowwise"                 ? "copy"
         : section == "small"                                              ? "roofline"
         : section == "scaling"                                            ? "1 thread"
                                                                           : "floor";
}

std::string csv_number(double v) {
  if (std::isnan(v)) return "";
  std::ostringstream out;
  out << std::setprecision(6) << v;
  return out.str();
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + '"';
}

std::string json_number(double v) {
  return std::isnan(v) ? "null" : csv_number(v);
}

}  // namespace

void print_table(const std::vector<Row>& rows, std::ostream& out) {
  std::string section;
  for (const Row& r : rows) {
    if (r.section != section) {
      section = r.section;
      out << '\n'
          << std::left << std::setw(36) << section << std::right << std::setw(10)
          << ("xtgrad " + r.unit) << std::setw(12) << floor_label(section) << std::setw(12)
          << ("LibTorch") << std::setw(12) << "xt/floor" << std::setw(12) << "LT/floor"
          << std::setw(10) << "xt/LT" << '\n';
    }
    const int precision = r.unit == "ms" ? 3 : r.unit == "s/epoch" ? 2 : 1;
    out << "  " << std::left << std::setw(34) << r.name << std::right << std::setw(10)
        << number(r.xtgrad, precision) << std::setw(12) << number(r.floor, precision)
        << std::setw(12) << number(r.libtorch, precision) << std::setw(12)
        << number(r.xtgrad_over_floor, 3) << std::setw(12) << number(r.libtorch_over_floor, 3)
        << std::setw(10) << number(r.xtgrad_over_libtorch, 3) << '\n';
  }
}

void write_csv(const std::vector<Row>& rows, const std::string& path) {
  std::ofstream out(path);
  out << "section,name,unit,xtgrad,floor,libtorch,xtgrad_over_floor,libtorch_over_floor,"
         "xtgrad_over_libtorch\n";
  for (const Row& r : rows)
    out << r.section << ',' << r.name << ',' << r.unit << ',' << csv_number(r.xtgrad) << ','
        << csv_number(r.floor) << ',' << csv_number(r.libtorch) << ','
        << csv_number(r.xtgrad_over_floor) << ',' << csv_number(r.libtorch_over_floor) << ','
        << csv_number(r.xtgrad_over_libtorch) << '\n';
  if (!out) throw std::runtime_error("bench_xtgrad: cannot write " + path);
}

void write_json(const std::vector<Row>& rows, const Meta& meta, const std::string& path) {
  std::ofstream out(path);
  out << "{\n  \"meta\": {";
  for (std::size_t i = 0; i < meta.size(); ++i)
    out << (i ? ", " : "") << "\n    " << json_string(meta[i].first) << ": "
        << json_string(meta[i].second);
  out << "\n  },\n  \"rows\": [";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    out << (i ? "," : "") << "\n    {\"section\": " << json_string(r.section)
        << ", \"name\": " << json_string(r.name) << ", \"unit\": " << json_string(r.unit)
        << ", \"xtgrad\": " << json_number(r.xtgrad) << ", \"floor\": " << json_number(r.floor)
        << ", \"libtorch\": " << json_number(r.libtorch)
        << ", \"xtgrad_over_floor\": " << json_number(r.xtgrad_over_floor)
        << ", \"libtorch_over_floor\": " << json_number(r.libtorch_over_floor)
        << ", \"xtgrad_over_libtorch\": " << json_number(r.xtgrad_over_libtorch) << '}';
  }
  out << "\n  ]\n}\n";
  if (!out) throw std::runtime_error("bench_xtgrad: cannot write " + path);
}

// The block that bench/update_results.cmake puts into docs/benchmarks.md.
void write_markdown(const std::vector<Row>& rows, const Meta& meta, const std::string& path) {
  std::ofstream out(path);
  for (const auto& [key, value] : meta) out << "- " << key << ": " << value << '\n';
  std::string section;
  for (const Row& r : rows) {
    if (r.section != section) {
      section = r.section;
      out << "\n| " << section << " | xtgrad " << r.unit << " | " << floor_label(section)
          << " | LibTorch | xt/floor | LT/floor | xt/LT |\n|---|---|---|---|---|---|---|\n";
    }
    const int precision = r.unit == "ms" ? 3 : r.unit == "s/epoch" ? 2 : 1;
    out << "| " << r.name << " | " << number(r.xtgrad, precision) << " | "
        << number(r.floor, precision) << " | " << number(r.libtorch, precision) << " | "
        << number(r.xtgrad_over_floor, 3) << " | " << number(r.libtorch_over_floor, 3) << " | "
        << number(r.xtgrad_over_libtorch, 3) << " |\n";
  }
  if (!out) throw std::runtime_error("bench_xtgrad: cannot write " + path);
}

}  // namespace xtgrad::bench
