// The memory soak: the toy model of demos/train_toy
// (PositionwiseFFN 2 -> 16, Adam, 128 tokens) trained for many steps with
// tape.clear() between them. After a warm-up the resident set size, read from
// /proc/self/statm, must not grow by 1 percent or more: the tape reuses its
// node buffers, so a steady-state step allocates and frees the same blocks.
//
//   soak [--steps N] [--warmup W] [--samples K]
//     N steps in all (default 100000), the first W (default N / 10, at least
//     100) are warm-up; the RSS is sampled K times (default 20) after it.
//
// Prints the figures and exits 0 when growth < 1 % and the loss went down, 1
// otherwise, 2 on a bad argument. Under AddressSanitizer (whose quarantine
// holds freed memory on purpose) the RSS bound is not checked.

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>

#include <xtensor/xtensor.hpp>
#include <xtgrad/engine/engine.hpp>
#include <xtgrad/modules/modules.hpp>
#include <xtgrad/optim/optim.hpp>

#if defined(__SANITIZE_ADDRESS__)
#define XTGRAD_SOAK_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define XTGRAD_SOAK_ASAN 1
#endif
#endif
#ifndef XTGRAD_SOAK_ASAN
#define XTGRAD_SOAK_ASAN 0
#endif

namespace {

using namespace xtgrad;

constexpr double k_max_growth = 0.01;  // 1% growth allowed after warm-up
constexpr std::size_t k_tokens = 128;

// Resident set size in bytes: the second field of /proc/self/statm, in pages.
std::size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::size_t total_pages = 0, resident_pages = 0;
  statm >> total_pages >> resident_pages;
  return resident_pages * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}

bool parse_count(const char* text, std::size_t& out) {
  char* end = nullptr;
  if (text == nullptr || *text < '0' || *text > '9') return false;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (*end != '\0') return false;
  out = static_cast<std::size_t>(value);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t steps = 100000, warmup = 0, samples = 20;
  bool warmup_given = false;
  for (int i = 1; i < argc; i += 2) {  // flag value pairs
    const std::string flag = argv[i];
    const char* value = i + 1 < argc ? argv[i + 1] : nullptr;
    std::size_t* target = flag == "--steps"     ? &steps
                          : flag == "--warmup"  ? &warmup
                          : flag == "--samples" ? &samples
                                                : nullptr;
    if (target == nullptr || !parse_count(value, *target)) {
      std::fprintf(stderr,
                   "soak: bad argument '%s'; usage: soak [--steps N] [--warmup W] [--samples K]\n",
                   argv[i]);
      return 2;
    }
    warmup_given = warmup_given || flag == "--warmup";
  }
  if (!warmup_given) warmup = std::max<std::size_t>(100, steps / 10);
  if (steps <= warmup || samples == 0) {
    std::fprintf(stderr, "soak: need --steps > --warmup (got %zu <= %zu) and --samples > 0\n",
                 steps, warmup);
    return 2;
  }

  // The data of demos/train_toy: y1 = |x1| + 0.3 x2, y2 = max(0, x2 - 0.2) - 0.4 x1.
  std::mt19937_64 data_generator(0);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  xt::xarray<float> x = xt::empty<float>({k_tokens, std::size_t{2}});
  xt::xarray<float> y = xt::empty<float>({k_tokens, std::size_t{2}});
  for (std::size_t i = 0; i < k_tokens; ++i) {
    const double x1 = uniform(data_generator), x2 = uniform(data_generator);
    x(i, 0) = static_cast<float>(x1);
    x(i, 1) = static_cast<float>(x2);
    y(i, 0) = static_cast<float>(std::abs(x1) + 0.3 * x2);
    y(i, 1) = static_cast<float>(std::max(0.0, x2 - 0.2) - 0.4 * x1);
  }

  Generator init_generator(1);
  PositionwiseFFN<float> model(2, 16, init_generator);
  optim::Adam<float> opt(model.parameters(), optim::AdamOptions(1e-2));
  Tape<float> tape;
  float first_loss = 0.0f, last_loss = 0.0f;
  std::size_t baseline = 0, peak = 0, last = 0;
  const std::size_t sample_every = std::max<std::size_t>(1, (steps - warmup) / samples);

  for (std::size_t step = 1; step <= steps; ++step) {
    Var<float> loss = mse(model(tape.leaf(x, false)), tape.leaf(y, false));
    last_loss = loss.value()();
    if (step == 1) first_loss = last_loss;
    tape.backward(loss);
    opt.step();
    opt.zero_grad();
    tape.clear();
    if (step == warmup) baseline = peak = resident_bytes();
    if (step > warmup && ((step - warmup) % sample_every == 0 || step == steps)) {
      last = resident_bytes();
      peak = std::max(peak, last);
    }
  }

  const double growth = (static_cast<double>(peak) - static_cast<double>(baseline)) / baseline;
  std::printf("soak: %zu steps (warm-up %zu), loss %.3e -> %.3e\n", steps, warmup, first_loss,
              last_loss);
  std::printf(
      "soak: resident memory after warm-up %zu bytes, peak %zu, at the end %zu: growth %+.3f %%\n",
      baseline, peak, last, 100.0 * growth);
  bool ok = true;
  if (!(last_loss < first_loss) || !std::isfinite(last_loss)) {
    std::printf("soak: FAILED: the loss did not go down\n");
    ok = false;
  }
  if (XTGRAD_SOAK_ASAN) {
    std::printf("soak: AddressSanitizer build: the resident-memory bound is not checked\n");
  } else if (growth >= k_max_growth) {
    std::printf("soak: FAILED: resident memory grew by %.3f %%, the bound is %.1f %%\n",
                100.0 * growth, 100.0 * k_max_growth);
    ok = false;
  }
  return ok ? 0 : 1;
}
