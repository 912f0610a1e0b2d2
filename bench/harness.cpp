#include "harness.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <string>
#include <thread>

namespace xtgrad::bench {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Seconds per call over `inner` calls.
double sample(const Runner& run, int inner) {
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < inner; ++i) run();
  return seconds_since(start) / inner;
}

long status_field_kib(const char* field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  const std::string key = std::string(field) + ":";
  while (std::getline(status, line))
    if (line.compare(0, key.size(), key) == 0) return std::stol(line.substr(key.size()));
  return -1;
}

constexpr int k_max_inner = 1 << 20;

}  // namespace

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

std::vector<Timing> measure_interleaved(const std::vector<Contestant>& contestants,
                                        const TimingOptions& options) {
  const std::size_t count = contestants.size();
  std::vector<int> inner(count, 1);
  const auto prepare = [&](std::size_t c) {
    if (contestants[c].prepare) contestants[c].prepare();
  };
  for (std::size_t c = 0; c < count; ++c) {
    prepare(c);
    double last = 0;
    for (int w = 0; w < std::max(options.warmup, 1); ++w) last = sample(contestants[c].run, 1);
    // Enough calls per sample to dwarf the clock's resolution and call overhead.
    if (last < options.min_sample_seconds)
      inner[c] = static_cast<int>(std::min<double>(
          k_max_inner, std::ceil(options.min_sample_seconds / std::max(last, 1e-9))));
    if (inner[c] > 1) sample(contestants[c].run, inner[c]);  // warm the batched loop too
  }
  std::vector<std::vector<double>> samples(count);
  std::vector<double> total(count, 0);
  for (int round = 0; round < options.max_rounds; ++round) {
    const bool enough =
        round >= options.min_rounds &&
        std::all_of(total.begin(), total.end(), [&](double t) { return t >= options.min_seconds; });
    if (enough) break;
    for (std::size_t c = 0; c < count; ++c) {
      prepare(c);
      std::this_thread::sleep_for(std::chrono::duration<double>(options.settle_seconds));
      const double s = sample(contestants[c].run, inner[c]);
      samples[c].push_back(s);
      total[c] += s * inner[c];
    }
  }
  std::vector<Timing> result(count);
  for (std::size_t c = 0; c < count; ++c) {
    const auto [lo, hi] = std::minmax_element(samples[c].begin(), samples[c].end());
    result[c] = {median(samples[c]), *lo, *hi, inner[c], samples[c]};
  }
  return result;
}

double paired_ratio(const Timing& a, const Timing& b) {
  std::vector<double> ratios;
  for (std::size_t r = 0; r < a.samples.size() && r < b.samples.size(); ++r)
    ratios.push_back(a.samples[r] / b.samples[r]);
  return median(ratios);
}

long resident_kib() {
  return status_field_kib("VmRSS");
}
long peak_resident_kib() {
  return status_field_kib("VmHWM");
}

}  // namespace xtgrad::bench
