// Temperature, top-k and the seeded draw of GPT::generate (sampling.hpp).
#include "sampling.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

namespace xtgrad {

namespace {

// z / temperature.
void apply_temperature(std::vector<double>& z, double temperature) {
  for (double& v : z) v /= temperature;
}

// Every value below the k-th largest becomes -inf (ties at the k-th value stay).
void keep_top_k(std::vector<double>& z, std::size_t k) {
  if (k >= z.size()) return;
  std::vector<double> sorted = z;
  std::nth_element(sorted.begin(), sorted.begin() + std::ptrdiff_t(k - 1), sorted.end(),
                   std::greater<double>());
  const double threshold = sorted[k - 1];
  for (double& v : z)
    if (v < threshold) v = -std::numeric_limits<double>::infinity();
}

// softmax(z) in double, then the inverse CDF at one uniform u in [0, 1).
std::int64_t draw(std::vector<double>& z, Generator& rng) {
  const double m = *std::max_element(z.begin(), z.end());
  double total = 0.0;
  for (double& v : z) total += (v = std::exp(v - m));
  const double u = static_cast<double>(rng() >> 11) * 0x1p-53;  // uniform in [0, 1)
  const double target = u * total;
  double cumulative = 0.0;
  std::int64_t last = 0;
  for (std::size_t i = 0; i < z.size(); ++i) {
    if (z[i] == 0.0) continue;
    cumulative += z[i];
    last = std::int64_t(i);
    if (cumulative > target) return last;
  }
  return last;  // rounding left target at the very end
}

}  // namespace

void check_sampling(const detail::Check& check, double temperature,
                    std::optional<std::size_t> top_k) {
  check.argument(temperature >= 0.0 && std::isfinite(temperature), "temperature", "is ",
                 temperature, ", expected a finite temperature >= 0");
  check.argument(!top_k || *top_k != 0, "top_k", "is 0, expected k >= 1");
}

std::int64_t sample_token(std::vector<double> logits, double temperature,
                          std::optional<std::size_t> top_k, Generator& rng) {
  if (temperature == 0.0)
    return std::int64_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  apply_temperature(logits, temperature);
  if (top_k) keep_top_k(logits, *top_k);
  return draw(logits, rng);
}

}  // namespace xtgrad
