// Packed weights (kernels/onednn_packed_weights.hpp) and the Parameter
// version they are keyed on (parameter.hpp): linear and activation_linear
// give the bits of the unpacked path (set_weight_packing(false), the default),
// forward and backward, at 1 and 2 threads, at either matmul precision; no
// packed copy outlives the value it was made from (load_state_dict, an
// optimizer step, set_value, mark_changed, a Parameter destroyed and another
// made in its place); a Parameter's id and version.
#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <xtgrad/engine/engine.hpp>
#include <xtgrad/engine/kernels/onednn_gemm.hpp>
#include <xtgrad/engine/matmul_precision.hpp>
#include <xtgrad/engine/threads.hpp>
#include <xtgrad/modules/linear.hpp>
#include <xtgrad/optim/sgd.hpp>

#include "support/bit_equal.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using xtgrad::testing::bit_equal;
using xtgrad::testing::random_array;

namespace {

// Packing on or off for a scope, the cache emptied on entry and exit.
struct PackingScope {
  explicit PackingScope(bool on) : before(weight_packing()) {
    detail::clear_packed_weights();
    set_weight_packing(on);
  }
  ~PackingScope() {
    set_weight_packing(before);
    detail::clear_packed_weights();
  }
  PackingScope(const PackingScope&) = delete;
  PackingScope& operator=(const PackingScope&) = delete;
  bool before;
};

struct Result {
  xt::xarray<float> y, dx, dw;
};

bool bit_equal(const Result& a, const Result& b) {
  return testing::bit_equal(a.y, b.y) && testing::bit_equal(a.dx, b.dx) &&
         testing::bit_equal(a.dw, b.dw);
}

// y = x W^T (or relu(x) W^T when fused), then backward with a random dy.
Result run(Parameter<float>& w, const xt::xarray<float>& x, bool fused) {
  Tape<float> tape;
  w.zero_grad();
  const Var<float> xv = tape.leaf(x);
  const Var<float> y =
      fused ? activation_linear(xv, Activation::relu, tape.param(w)) : linear(xv, tape.param(w));
  const Shape shape = y.shape();
  tape.backward(y, random_array<float>({shape.begin(), shape.end()}, 99));
  return {y.value(), xv.grad(), w.grad};
}

// The unpacked result of run on the current value of w.
Result unpacked(Parameter<float>& w, const xt::xarray<float>& x, bool fused) {
  detail::set_weight_packing(false);
  Result r = run(w, x, fused);
  detail::set_weight_packing(true);
  return r;
}

// x [rows, in] . W[out, in]^T: a product split over C's columns (128 rows,
// two parts), one split over its rows (640 rows), and the fused op's row
// blocks (two blocks of 512 rows, each split in four).
struct Case {
  std::size_t rows, in, out;
  bool fused;
};
const Case k_cases[] = {{128, 256, 512, false}, {640, 256, 64, false}, {1024, 1024, 64, true}};

}  // namespace

TEST_CASE("packed weights: the bits of the unpacked path, forward and backward, 1 and 2 threads") {
  const int threads_before = get_num_threads();
  const std::vector<MatmulPrecision> precisions =
      matmul_precision_supported(MatmulPrecision::bf16)
          ? std::vector<MatmulPrecision>{MatmulPrecision::highest, MatmulPrecision::bf16}
          : std::vector<MatmulPrecision>{MatmulPrecision::highest};
  for (const MatmulPrecision precision : precisions)
    for (const Case& c : k_cases) {
      set_matmul_precision(precision);
      Parameter<float> w("w", random_array<float>({c.out, c.in}, 1, -0.5, 0.5));
      const xt::xarray<float> x = random_array<float>({c.rows, c.in}, 2);
      std::vector<Result> per_thread_count;
      for (const int threads : {1, 2}) {
        set_num_threads(threads);
        const PackingScope packing(true);
        const Result reference = unpacked(w, x, c.fused);
        // noted, then packed, then read packed
        for (int use = 0; use < 3; ++use) {
          const Result packed = run(w, x, c.fused);
          INFO("rows ", c.rows, " out ", c.out, " fused ", c.fused, " threads ", threads,
               " precision ", matmul_precision_name(precision), " use ", use);
          CHECK(bit_equal(packed, reference));
        }
        // packed where oneDNN runs brgemm both ways (AVX-512 CPUs)
        if (detail::onednn_info().find("brg:") != std::string::npos)
          CHECK(detail::packed_weight_stats().packed > 0);
        per_thread_count.push_back(reference);
      }
      CHECK(bit_equal(per_thread_count[0], per_thread_count[1]));
    }
  set_matmul_precision(MatmulPrecision::highest);
  set_num_threads(threads_before);
}

TEST_CASE("packed weights: never stale after load_state_dict, a step, set_value, mark_changed") {
  const PackingScope packing(true);
  Linear<float> layer(256, 512, false);
  const xt::xarray<float> x = random_array<float>({128, 256}, 3);
  // y must be the unpacked product of the weight's current value
  const auto check_current = [&](const std::string& after) {
    for (int use = 0; use < 2; ++use) {  // the second use reads the packed copy
      INFO("after ", after, ", use ", use);
      CHECK(bit_equal(run(layer.weight, x, false), unpacked(layer.weight, x, false)));
    }
  };
  check_current("construction");

  TensorDict<float> state;
  state.insert("weight", random_array<float>({512, 256}, 4, -0.5, 0.5));
  layer.load_state_dict(state);
  check_current("load_state_dict");

  optim::SGD<float> sgd({&layer.weight}, optim::SGDOptions(0.5));
  run(layer.weight, x, false);  // a gradient
  const std::size_t bytes = detail::packed_weight_stats().bytes;
  sgd.step();
  check_current("an SGD step");
  sgd.step();
  check_current("a second SGD step");
  CHECK(detail::packed_weight_stats().bytes == bytes);  // older versions dropped

  layer.weight.set_value(random_array<float>({512, 256}, 5));
  check_current("set_value");

  layer.weight.value *= 2.0f;  // in place: the same buffer
  layer.weight.mark_changed();
  check_current("an in-place write and mark_changed");
}

TEST_CASE("packed weights: off by default, where a raw write to a value is always seen") {
  REQUIRE(!weight_packing());
  Linear<float> layer(256, 512, false);
  const xt::xarray<float> x = random_array<float>({128, 256}, 9);
  for (int use = 0; use < 3; ++use) run(layer.weight, x, false);  // packed, were packing on
  CHECK(detail::packed_weight_stats().packed == 0);
  const xt::xarray<float> before = run(layer.weight, x, false).y;
  layer.weight.value *= 2.0f;  // in place, the version not bumped
  const xt::xarray<float> after = run(layer.weight, x, false).y;
  CHECK(bit_equal(after, xt::xarray<float>(2.0f * before)));
}

TEST_CASE("packed weights: a Parameter made where a destroyed one was") {
  const PackingScope packing(true);
  const xt::xarray<float> x = random_array<float>({128, 256}, 6);
  std::optional<Parameter<float>> w;
  w.emplace("w", random_array<float>({512, 256}, 7));
  run(*w, x, false);
  run(*w, x, false);  // packed
  const std::uint64_t old_id = w->id();
  w.reset();
  w.emplace("w", random_array<float>({512, 256}, 8));  // same address, version 0 again
  CHECK(w->id() != old_id);
  CHECK(w->version() == 0);
  for (int use = 0; use < 2; ++use) CHECK(bit_equal(run(*w, x, false), unpacked(*w, x, false)));
}

TEST_CASE("Parameter: id and version") {
  Parameter<float> p("p", xt::zeros<float>({2, 3}));
  const std::uint64_t id = p.id(), version = p.version();
  CHECK(id != 0);
  p.mark_changed();
  CHECK(p.version() == version + 1);
  p.set_value(xt::ones<float>({2, 3}));
  CHECK(p.version() == version + 2);
  p.set_requires_grad(false);
  CHECK(p.version() == version + 3);

  const Parameter<float> copy(p);  // a new Parameter
  CHECK(copy.id() != id);
  CHECK(copy.version() == 0);
  CHECK(bit_equal(copy.value, p.value));
  Parameter<float> target("t", xt::zeros<float>({1}));
  const std::uint64_t target_id = target.id(), target_version = target.version();
  target = p;  // the same Parameter with another value
  CHECK(target.id() == target_id);
  CHECK(target.version() == target_version + 1);
  Parameter<float> moved(std::move(p));
  CHECK(moved.id() != id);
  CHECK(p.version() == version + 4);  // its value is gone
  CHECK(moved.version() == 0);
  CHECK(moved.name == "p");
  CHECK(!moved.requires_grad);
}
