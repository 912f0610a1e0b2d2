// Temperature, top-k and the seeded draw of GPT::generate (sampling.hpp).
#include "sampling.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <utility>

namespace xtgrad {

namespace {

// z / temperature.
void apply_temperature(std::vector<double>& z, double temperature) {
  for (double& v : z) v /= temperature;
}

// The k-th largest value of z (duplicates counted, as nth_element finds it),
// k < z.size(): the k largest values so far in a min-heap, whose top it is,
// in one pass that for k << V mostly compares against the top.
double kth_largest(const std::vector<double>& z, std::size_t k) {
  std::vector<double> largest(z.begin(), z.begin() + std::ptrdiff_t(k));
  std::make_heap(largest.begin(), largest.end(), std::greater<double>());
  for (std::size_t i = k; i < z.size(); ++i)
    if (z[i] > largest.front()) {
      std::pop_heap(largest.begin(), largest.end(), std::greater<double>());
      largest.back() = z[i];
      std::push_heap(largest.begin(), largest.end(), std::greater<double>());
    }
  return largest.front();
}

// Every value below the k-th largest becomes -inf (ties at the k-th value stay).
void keep_top_k(std::vector<double>& z, std::size_t k) {
  if (k >= z.size()) return;
  const double threshold = kth_largest(z, k);
  for (double& v : z)
    if (v < threshold) v = -std::numeric_limits<double>::infinity();
}

// Every token outside the nucleus becomes -inf: the fewest most probable
// tokens of softmax(z) whose probabilities sum to at least top_p.
void keep_top_p(std::vector<double>& z, double top_p) {
  const double m = *std::max_element(z.begin(), z.end());
  std::vector<double> p(z.size());
  double total = 0.0;
  for (std::size_t i = 0; i < z.size(); ++i) total += (p[i] = std::exp(z[i] - m));
  std::vector<std::size_t> order(z.size());
  std::iota(order.begin(), order.end(), std::size_t(0));
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return p[a] > p[b]; });
  double cumulative = 0.0;
  std::size_t kept = 0;
  while (kept < order.size() && (kept == 0 || cumulative < top_p * total))
    cumulative += p[order[kept++]];
  for (std::size_t r = kept; r < order.size(); ++r)
    z[order[r]] = -std::numeric_limits<double>::infinity();
}

// The inverse CDF of the weights w (their sum `total`) at one uniform u in
// [0, 1): the token index_of(r) of the first w[r] where the running sum
// passes u * total.
template <class IndexOf>
std::int64_t inverse_cdf(const std::vector<double>& w, double total, Generator& rng,
                         const IndexOf& index_of) {
  const double u = static_cast<double>(rng() >> 11) * 0x1p-53;  // uniform in [0, 1)
  const double target = u * total;
  double cumulative = 0.0;
  std::int64_t last = 0;
  for (std::size_t r = 0; r < w.size(); ++r) {
    if (w[r] == 0.0) continue;
    cumulative += w[r];
    last = std::int64_t(index_of(r));
    if (cumulative > target) return last;
  }
  return last;  // rounding left target at the very end
}

// softmax(z) in double, then the inverse CDF at one uniform u in [0, 1).
std::int64_t draw(std::vector<double>& z, Generator& rng) {
  const double m = *std::max_element(z.begin(), z.end());
  double total = 0.0;
  // exp(-inf) is 0: the tokens top_k or top_p cut cost no exp
  for (double& v : z)
    total += (v = v == -std::numeric_limits<double>::infinity() ? 0.0 : std::exp(v - m));
  return inverse_cdf(z, total, rng, [](std::size_t i) { return i; });
}

// keep_top_k(z, k) then draw(z, rng), for k < z.size(), over the kept
// tokens alone (at most k plus the ties, against all V of them): the same
// sums in the same order, since the tokens cut add exp(-inf) = 0 to them, so
// the same token. nullopt, for the other path to take, when a kept value is
// not finite (NaN, or every kept logit -inf), whose passes are not these.
std::optional<std::int64_t> draw_top_k(const std::vector<double>& z, std::size_t k,
                                       Generator& rng) {
  const double threshold = kth_largest(z, k);
  std::vector<std::size_t> kept;
  kept.reserve(k);
  double m = -std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < z.size(); ++i)
    if (!(z[i] < threshold)) {
      if (!std::isfinite(z[i])) return std::nullopt;
      kept.push_back(i);
      m = std::max(m, z[i]);
    }
  std::vector<double> p(kept.size());
  double total = 0.0;
  for (std::size_t r = 0; r < kept.size(); ++r) total += (p[r] = std::exp(z[kept[r]] - m));
  return inverse_cdf(p, total, rng, [&kept](std::size_t r) { return kept[r]; });
}

}  // namespace

void check_sampling(const detail::Check& check, double temperature,
                    std::optional<std::size_t> top_k) {
  check.argument(temperature >= 0.0 && std::isfinite(temperature), "temperature", "is ",
                 temperature, ", expected a finite temperature >= 0");
  check.argument(!top_k || *top_k != 0, "top_k", "is 0, expected k >= 1");
}

void check_top_p(const detail::Check& check, double top_p) {
  check.argument(top_p > 0.0 && top_p <= 1.0, "top_p", "is ", top_p,
                 ", expected a probability in (0, 1]");
}

std::int64_t sample_token(std::vector<double> logits, double temperature,
                          std::optional<std::size_t> top_k, Generator& rng) {
  return sample_token(std::move(logits), temperature, top_k, 1.0, rng);
}

std::int64_t sample_token(std::vector<double> logits, double temperature,
                          std::optional<std::size_t> top_k, double top_p, Generator& rng) {
  if (temperature == 0.0)
    return std::int64_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  apply_temperature(logits, temperature);
  if (top_k && *top_k < logits.size() && top_p == 1.0)
    if (const std::optional<std::int64_t> token = draw_top_k(logits, *top_k, rng)) return *token;
  if (top_k) keep_top_k(logits, *top_k);
  if (top_p < 1.0) keep_top_p(logits, top_p);
  return draw(logits, rng);
}

}  // namespace xtgrad
