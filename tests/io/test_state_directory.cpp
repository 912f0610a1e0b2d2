// Training-state directories (io/state_directory.hpp) and the join
// of a model, an optimizer and a schedule (training/training_state.hpp):
// exact round trips, the on-disk layout, atomic replacement, the memory
// limit, and all-or-nothing loads. Hostile files are rows of
// tests/hardening/test_bad_input_io.cpp.

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <xtgrad/io/state_directory.hpp>
#include <xtgrad/modules/modules.hpp>
#include <xtgrad/optim/optim.hpp>
#include <xtgrad/training/training_state.hpp>

#include "support/bit_equal.hpp"
#include "support/npy_bytes.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;
namespace fs = std::filesystem;

namespace {

template <class T>
StateDict<T> sample_state() {
  StateDict<T> s;
  s.arrays["w"] = random_array<T>({3, 2}, 1);
  s.arrays["scalar"] = xt::xarray<T>(T(0.1));
  s.arrays["empty"] = xt::zeros<T>({0, 4});
  s.arrays["tiny"] = xt::xarray<T>{std::numeric_limits<T>::denorm_min(), T(-0.0),
                                   std::numeric_limits<T>::infinity()};
  s.integers["step"] = 1000;
  s.integers["min"] = std::numeric_limits<std::int64_t>::min();
  s.integers["max"] = std::numeric_limits<std::int64_t>::max();
  s.integers["big_odd"] = (std::int64_t(1) << 53) + 1;  // not exact in a double
  s.reals["lr"] = 0.1;
  s.reals["third"] = 1.0 / 3.0;
  s.reals["negative_zero"] = -0.0;
  s.reals["denormal"] = std::numeric_limits<double>::denorm_min();
  s.reals["huge"] = std::numeric_limits<double>::max();
  s.reals["inf"] = -std::numeric_limits<double>::infinity();
  s.reals["nan"] = std::numeric_limits<double>::quiet_NaN();
  s.strings["type"] = "AdamW";
  s.strings["note"] = "with spaces and 'quotes'";
  return s;
}

}  // namespace

TEST_CASE_TEMPLATE("state directory: every array, integer, real and string round-trips exactly", T,
                   float, double) {
  TempDir dir("state");
  const StateDict<T> saved = sample_state<T>();
  save_state_directory(dir / "s", saved);
  const StateDict<T> loaded = load_state_directory<T>(dir / "s", 1 << 20);
  REQUIRE(loaded.arrays.size() == saved.arrays.size());
  for (const auto& entry : saved.arrays) {
    // not structured bindings: doctest's message macros capture them in lambdas (not C++17)
    const auto& name = std::get<0>(entry);
    const auto& a = std::get<1>(entry);
    CAPTURE(name);
    CHECK(bit_equal(loaded.arrays.at(name), a));
  }
  CHECK(loaded.integers == saved.integers);
  CHECK(loaded.strings == saved.strings);
  REQUIRE(loaded.reals.size() == saved.reals.size());
  for (const auto& entry : saved.reals) {
    // not structured bindings: doctest's message macros capture them in lambdas (not C++17)
    const auto& name = std::get<0>(entry);
    const auto& x = std::get<1>(entry);
    CAPTURE(name);
    if (std::isnan(x))
      CHECK(std::isnan(loaded.reals.at(name)));
    else
      CHECK(bit_equal(loaded.reals.at(name), x));
  }
}

TEST_CASE(
    "state directory: the layout is a checkpoint's manifest and .npy files plus scalars.tsv") {
  TempDir dir("state-layout");
  StateDict<float> s;
  s.arrays["state.0.exp_avg"] = xt::xarray<float>{1.5f, -2.0f};
  s.integers["state.0.step"] = 7;
  s.reals["lr"] = 0.1;
  s.strings["type"] = "Adam";
  save_state_directory(dir / "s", s);
  CHECK(directory_names(dir / "s") ==
        std::vector<std::string>{"manifest.tsv", "scalars.tsv", "state.0.exp_avg.npy"});
  CHECK(read_file(dir / "s" / "manifest.tsv") ==
        "xtgrad-checkpoint 1\nstate.0.exp_avg\tfloat32\t2\tstate.0.exp_avg.npy\n");
  CHECK(read_file(dir / "s" / "scalars.tsv") ==
        "xtgrad-scalars 1\nint64\tstate.0.step\t7\nfloat64\tlr\t0.1\nstring\ttype\tAdam\n");
  CHECK(read_file(dir / "s" / "state.0.exp_avg.npy") ==
        npy_file(npy_dict("<f4", "(2,)"), element_bytes<float>({1.5, -2.0})));
  // Written by hand, it loads: CRLF line endings and empty lines at the end too.
  write_file(dir / "s" / "scalars.tsv",
             "xtgrad-scalars 1\r\nint64\tstate.0.step\t-42\r\nfloat64\tlr\t1e-3\r\n\r\n");
  const StateDict<float> back = load_state_directory<float>(dir / "s", 8);
  CHECK(back.integers.at("state.0.step") == -42);
  CHECK(back.reals.at("lr") == 1e-3);
  CHECK(back.strings.empty());
}

TEST_CASE("state directory: save replaces a previous one, a failed save keeps it") {
  TempDir dir("state-replace");
  StateDict<double> first;
  first.arrays["a"] = xt::xarray<double>{1, 2};
  first.integers["step"] = 1;
  save_state_directory(dir / "s", first);
  StateDict<double> second;
  second.arrays["b"] = xt::xarray<double>{3};
  second.integers["step"] = 2;
  save_state_directory(dir / "s", second);
  CHECK(directory_names(dir / "s") ==
        std::vector<std::string>{"b.npy", "manifest.tsv", "scalars.tsv"});
  CHECK(directory_names(dir.path()) == std::vector<std::string>{"s"});  // no temporary left

  StateDict<double> bad = second;
  bad.strings["note"] = "a\nnewline";
  CHECK_THROWS_WITH_AS(save_state_directory(dir / "s", bad), doctest::Contains("string 'note'"),
                       std::invalid_argument);
  bad = second;
  bad.arrays["../escape"] = xt::xarray<double>{1};
  CHECK_THROWS_WITH_AS(save_state_directory(dir / "s", bad),
                       doctest::Contains("cannot name a checkpoint file"), std::invalid_argument);
  CHECK(load_state_directory<double>(dir / "s", 64).integers.at("step") == 2);
  CHECK(directory_names(dir.path()) == std::vector<std::string>{"s"});
}

TEST_CASE("state directory: arrays above the caller's limit are refused before any is read") {
  TempDir dir("state-limit");
  StateDict<float> s;
  s.arrays["a"] = xt::zeros<float>({4, 4});  // 64 bytes
  s.arrays["b"] = xt::zeros<float>({2});     // 8 bytes
  save_state_directory(dir / "s", s);
  CHECK(load_state_directory<float>(dir / "s", 72).arrays.size() == 2);
  CHECK_THROWS_WITH_AS(load_state_directory<float>(dir / "s", 71),
                       doctest::Contains("declares arrays of 72 bytes in all, more than the 71"),
                       std::invalid_argument);
}

// ---------------------------------------------------------------- training state

TEST_CASE_TEMPLATE("training state: a model, optimizer, schedule and extras round-trip", T, float,
                   double) {
  TempDir dir("training-state");
  Linear<T> model(3, 2);
  optim::AdamW<T> adamw({{{&model.weight}, optim::AdamWOptions(0.1)},
                         {{&model.bias}, optim::AdamWOptions(0.05).weight_decay(0)}});
  optim::CosineAnnealingLR<T> cosine(adamw, 10);
  for (auto* p : model.parameters()) {
    p->grad = random_array<T>({p->value.shape().begin(), p->value.shape().end()}, 4);
    p->has_grad = true;
  }
  adamw.step();
  cosine.step();
  save_training_state(dir / "t", model, adamw, &cosine,
                      {{{"step", 1}, {"epoch", -3}}, {{"best_loss", 0.125}}});
  CHECK(read_file(dir / "t" / "manifest.tsv").find("model.weight\t") != std::string::npos);

  Linear<T> fresh(3, 2, true, detail::lvalue(Generator(99)));
  optim::AdamW<T> fresh_adamw(
      {{{&fresh.weight}, optim::AdamWOptions(1.0)}, {{&fresh.bias}, optim::AdamWOptions(1.0)}});
  optim::CosineAnnealingLR<T> fresh_cosine(fresh_adamw, 10);
  const TrainingExtras extras = load_training_state(dir / "t", fresh, fresh_adamw, &fresh_cosine);
  CHECK(extras.integers == std::map<std::string, std::int64_t>{{"epoch", -3}, {"step", 1}});
  CHECK(extras.reals.at("best_loss") == 0.125);
  CHECK(bit_equal(fresh.weight.value, model.weight.value));
  CHECK(bit_equal(fresh.bias.value, model.bias.value));
  CHECK(fresh_cosine.last_epoch() == 1);
  CHECK(fresh_adamw.lr(1) == adamw.lr(1));
  CHECK(fresh_adamw.state(0)->step == 1);
  CHECK(bit_equal(fresh_adamw.state(1)->exp_avg_sq, adamw.state(1)->exp_avg_sq));
}
