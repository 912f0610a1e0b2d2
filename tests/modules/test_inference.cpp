// Module::infer: array in, array out, the values of forward, nothing
// recorded, no gradient touched, memory flat over a serving loop.
#include <doctest/doctest.h>

#include <unistd.h>
#include <fstream>
#include <thread>

#include <xtensor/xview.hpp>
#include <xtgrad/engine/engine.hpp>
#include <xtgrad/modules/modules.hpp>

#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;

namespace {

// Resident memory of this process in bytes (/proc/self/statm, second field).
std::size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}

template <class T, class M>
void check_infer_equals_forward(M& module, const xt::xarray<T>& x) {
  Tape<T> tape;
  const Var<T> y = module(tape.leaf(x, false));
  const xt::xarray<T> expected = y.value();
  const M& constant = module;
  const xt::xarray<T> actual = constant.infer(x);
  CHECK(actual == expected);  // the same kernels in the same order: bit for bit
  for (const auto& entry : module.named_parameters()) {
    // not structured bindings: doctest's message macros capture them in lambdas (not C++17)
    const auto& name = std::get<0>(entry);
    const auto& p = std::get<1>(entry);
    CAPTURE(name);
    CHECK_FALSE(p->has_grad);
  }
}

}  // namespace

TEST_CASE_TEMPLATE("inference: infer equals forward bit for bit and touches no gradient", T, float,
                   double) {
  Generator generator(41);
  Linear<T> linear(5, 3, true, generator);
  FeedForward<T> feed_forward(5, 7, Activation::gelu, generator);
  PositionwiseFFN<T> positionwise(5, 7, generator);
  GatedFFN<T> gated(5, 6, 4, Activation::silu, GatedBias::all(), generator);
  for (const std::vector<std::size_t>& shape :
       {std::vector<std::size_t>{5}, {0, 5}, {3, 5}, {2, 3, 5}}) {
    CAPTURE(shape.size());
    const xt::xarray<T> x = random_array<T>(shape, 42);
    check_infer_equals_forward<T>(linear, x);
    check_infer_equals_forward<T>(feed_forward, x);
    check_infer_equals_forward<T>(positionwise, x);
    check_infer_equals_forward<T>(gated, x);
  }
  // A strided view is evaluated as its contiguous copy.
  const xt::xarray<T> wide = random_array<T>({4, 10}, 43);
  const auto view = xt::view(wide, xt::all(), xt::range(0, 10, 2));
  CHECK(feed_forward.infer(view) == feed_forward.infer(xt::xarray<T>(view)));
}

TEST_CASE("inference: a bad input throws as forward does, and the module is unchanged") {
  FeedForward<double> ffn(4, 6);
  const xt::xarray<double> w1 = ffn.w1.weight.value;
  CHECK_THROWS_WITH_PARTS(ffn.infer(xt::zeros<double>({2, 5})), std::invalid_argument,
                          {"xtgrad::feedforward", "'x'", "[2, 5]", "[..., 4]"});
  CHECK(ffn.w1.weight.value == w1);
  CHECK_FALSE(ffn.w1.weight.has_grad);
}

TEST_CASE("inference: a module without forward says so") {
  struct Holder : Module<double> {
    Parameter<double> scale{"scale", xt::xarray<double>{1.0}};
    void collect_parameters(const std::string& prefix, NamedParameters& out) override {
      add_parameter(prefix, scale, out);
    }
  };
  const Holder holder;
  CHECK_THROWS_WITH_PARTS(holder.infer(xt::xarray<double>{1.0}), std::logic_error,
                          {"xtgrad::Module::forward", "forward(x)"});
}

// AddressSanitizer keeps freed memory resident (its quarantine) by design, so
// resident memory says nothing about leaks there; LeakSanitizer checks those.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool k_resident_memory_is_meaningful = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool k_resident_memory_is_meaningful = false;
#else
constexpr bool k_resident_memory_is_meaningful = true;
#endif
#else
constexpr bool k_resident_memory_is_meaningful = true;
#endif

TEST_CASE("inference: a serving loop keeps resident memory flat") {
  // 2,000 calls on [64, 256] inputs of a 256 -> 1024 -> 256 block: each call
  // computes megabytes of values, none of which may outlive it.
  FeedForward<float> ffn(256, 1024);
  const xt::xarray<float> x = random_array<float>({64, 256}, 44);
  for (int i = 0; i < 50; ++i) ffn.infer(x);  // warm: allocator pools, BLAS buffers
  const std::size_t before = resident_bytes();
  float checksum = 0;
  for (int i = 0; i < 2000; ++i) checksum += ffn.infer(x)(0, 0);
  const std::size_t after = resident_bytes();
  CHECK(std::isfinite(checksum));
  CAPTURE(before);
  CAPTURE(after);
  if (k_resident_memory_is_meaningful)
    CHECK(after < before + (std::size_t(8) << 20));  // one call's values are ~0.4 MB
  else
    MESSAGE("resident memory not checked under AddressSanitizer");
}

TEST_CASE("inference: threads share one module") {
  GatedFFN<double> gated(6, 8, 6);
  const xt::xarray<double> x = random_array({16, 6}, 45);
  const xt::xarray<double> expected = gated.infer(x);
  std::vector<xt::xarray<double>> results(4);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < results.size(); ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) results[t] = gated.infer(x);
    });
  for (std::thread& thread : threads) thread.join();
  for (const auto& r : results) CHECK(r == expected);
}
