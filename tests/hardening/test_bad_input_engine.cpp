// The bad-input table of the engine: every op, the Tape and Var API, the
// activation names and gradcheck's options (the machinery is in
// tests/support/bad_input.hpp).

#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <typeinfo>
#include <utility>
#include <vector>

#include <xtensor/xtensor.hpp>
#include <xtgrad/engine/engine.hpp>

#include "support/bad_input.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;

TEST_CASE_TEMPLATE("bad input: engine ops and the Tape API", T, float, double) {
  Tape<T> tape, other, cleared;
  const Var<T> stale = cleared.leaf(xt::xarray<T>{1, 2});
  cleared.clear();
  const Var<T> empty;

  Var<T> x = tape.leaf(random_array<T>({2, 3}, 1));     // [N = 2, in = 3]
  Var<T> x2 = tape.leaf(random_array<T>({2, 3}, 2));    // same shape
  Var<T> w = tape.leaf(random_array<T>({4, 3}, 3));     // [out = 4, in = 3]
  Var<T> wt = tape.leaf(random_array<T>({3, 4}, 4));    // [in = 3, out = 4]
  Var<T> b = tape.leaf(random_array<T>({4}, 5));        // [out]
  Var<T> v4 = tape.leaf(random_array<T>({4}, 6));       // [4]
  Var<T> v5 = tape.leaf(random_array<T>({2, 5}, 7));    // [2, 5]
  Var<T> m33 = tape.leaf(random_array<T>({3, 3}, 8));   // [3, 3]
  Var<T> m32 = tape.leaf(random_array<T>({3, 2}, 9));   // [3, 2]
  Var<T> m14 = tape.leaf(random_array<T>({1, 4}, 10));  // [1, 4]
  Var<T> c3 = tape.leaf(random_array<T>({2, 3, 4}, 11));
  Var<T> scalar = tape.leaf(xt::xarray<T>(T(0.5)));  // 0-d
  Var<T> v3 = tape.leaf(xt::xarray<T>{1, 2, 3});
  Var<T> data = tape.leaf(random_array<T>({2, 3}, 12), false);
  Parameter<T> p("p", random_array<T>({4, 3}, 13));
  Var<T> pv = tape.param(p);
  Var<T> y = add(linear(x, w, b), linear(x2, pv));  // [2, 4]
  Var<T> y_scalar = sum(y);
  Var<T> y_data = scale(data, T(2));  // needs no gradient
  Var<T> y_nograd;
  {
    NoGradGuard<T> guard(tape);
    y_nograd = linear(x, w, b);
  }
  tape.backward(y_scalar);  // every leaf now holds a nonzero gradient
  const std::vector<Var<T>> leaves = {x, x2, w, wt, b, v4, v5, m33, m32, m14, c3, scalar, v3, data};

  auto snapshot = [&] {
    State s;
    s.add(tape.size());
    s.add(other.size());
    s.add(cleared.size());
    for (const Var<T>& v : leaves) s.add(v);
    s.add(p);
    s.add(y.value());
    return s;
  };

  std::vector<Row> rows;
  const auto bad = row_adder(rows);
  const auto IA = Expect::invalid_argument;
  const auto LE = Expect::logic_error;

  // linear, both layouts: each argument's rank and size in turn.
  bad("linear: 0-d x", [&] { linear(scalar, w, opt(b)); }, IA,
      {"linear", "'x'", "[]", "expected [..., 3]"});
  bad("linear: x of the wrong width", [&] { linear(v5, w, opt(b)); }, IA,
      {"linear", "'x'", "[2, 5]", "expected [..., 3]", "weight [4, 3]"});
  bad("linear: 1-d weight", [&] { linear(x, v4); }, IA,
      {"linear", "'weight'", "[4]", "expected [out, in]"});
  bad("linear: 3-d weight", [&] { linear(x, c3); }, IA,
      {"linear", "'weight'", "[2, 3, 4]", "expected [out, in]"});
  bad("linear: weight in the other layout", [&] { linear(x, wt, opt(b)); }, IA,
      {"linear", "'x'", "[2, 3]", "expected [..., 4]"});
  bad("linear: 2-d bias", [&] { linear(x, w, opt(m14)); }, IA,
      {"linear", "'bias'", "[1, 4]", "expected [4]"});
  bad("linear: bias of the wrong size", [&] { linear(x, w, opt(x2)); }, IA,
      {"linear", "'bias'", "[2, 3]", "expected [4]"});
  bad("linear in_out: x of the wrong width", [&] { linear(v5, wt, opt(b), WeightLayout::in_out); },
      IA, {"linear", "'x'", "[2, 5]", "expected [..., 3]"});
  bad("linear in_out: 1-d weight", [&] { linear(x, v4, std::nullopt, WeightLayout::in_out); }, IA,
      {"linear", "'weight'", "[4]", "expected [in, out]"});
  bad("linear in_out: bias of the wrong size",
      [&] { linear(x, wt, opt(x2), WeightLayout::in_out); }, IA,
      {"linear", "'bias'", "[2, 3]", "expected [4]"});
  bad("linear: a WeightLayout outside the enumeration",
      [&] { linear(x, m33, std::nullopt, static_cast<WeightLayout>(7)); }, IA,
      {"linear", "'layout'", "7"});
  add_handle_rows<T>(
      rows, "linear", {"x", "weight", "bias"}, {x, w, b},
      [](const std::vector<Var<T>>& a) { linear(a[0], a[1], opt(a[2])); }, other, stale);

  // activations and gated
  for (Activation a : {Activation::relu, Activation::gelu, Activation::gelu_tanh,
                       Activation::gelu_sigmoid, Activation::silu})
    add_handle_rows<T>(
        rows, "activation", {"x"}, {x}, [a](const std::vector<Var<T>>& v) { activation(v[0], a); },
        other, stale);
  bad("activation: an Activation outside the enumeration",
      [&] { activation(x, static_cast<Activation>(7)); }, IA,
      {"activation", "'a'", "Activation(7)", "relu, gelu, gelu_tanh, gelu_sigmoid, silu, tanh"});
  bad("activation_derivative: order 3", [&] { activation_derivative(x, Activation::gelu, 3); }, IA,
      {"activation_derivative", "'order'", "is 3", "expected 1 (f') or 2 (f'')"});
  bad("activation_derivative: order 0", [&] { activation_derivative(x, Activation::silu, 0); }, IA,
      {"activation_derivative", "'order'", "is 0"});
  bad("activation_derivative: an Activation outside the enumeration",
      [&] { activation_derivative(x, static_cast<Activation>(7), 1); }, IA,
      {"activation_derivative", "'a'", "Activation(7)"});
  for (int order : {1, 2})
    add_handle_rows<T>(
        rows, "activation_derivative", {"x"}, {x},
        [order](const std::vector<Var<T>>& v) {
          activation_derivative(v[0], Activation::silu, order);
        },
        other, stale);
  bad("gated: g of another shape", [&] { gated(x, m32, Activation::silu); }, IA,

      {"gated", "'g'", "[3, 2]", "expected [2, 3]"});
  bad("gated: g of another rank", [&] { gated(x, c3, Activation::gelu); }, IA,
      {"gated", "'g'", "[2, 3, 4]", "expected [2, 3]"});
  bad("gated: an Activation outside the enumeration",
      [&] { gated(x, x2, static_cast<Activation>(9)); }, IA, {"gated", "'a'", "Activation(9)"});
  add_handle_rows<T>(
      rows, "gated", {"u", "g"}, {x, x2},
      [](const std::vector<Var<T>>& v) { gated(v[0], v[1], Activation::silu); }, other, stale);

  // elementwise: shapes that do not broadcast, in either order
  for (const char* op : {"add", "sub", "mul"}) {
    const std::string name = op;
    auto apply = [name](const Var<T>& a, const Var<T>& b2) {
      if (name == "add") return add(a, b2);
      if (name == "sub") return sub(a, b2);
      return mul(a, b2);
    };
    bad(name + ": [2, 3] with [4]", [=] { apply(x, v4); }, IA,
        {name, "'b'", "[4]", "broadcasts with argument 'a'", "[2, 3]", "axis -1"});
    bad(name + ": [2, 3] with [3, 3]", [=] { apply(x, m33); }, IA,
        {name, "'b'", "[3, 3]", "[2, 3]", "axis -2"});
    bad(name + ": [2, 3, 4] with [2, 3]", [=] { apply(c3, x); }, IA, {name, "'b'", "[2, 3]"});
    add_handle_rows<T>(
        rows, name, {"a", "b"}, {x, x2},
        [apply](const std::vector<Var<T>>& v) { apply(v[0], v[1]); }, other, stale);
  }
  bad("operator+: shapes that do not broadcast", [&] { x + v4; }, IA, {"add", "'b'", "[4]"});
  bad("operator*: shapes that do not broadcast", [&] { x* m33; }, IA, {"mul", "'b'", "[3, 3]"});
  add_handle_rows<T>(
      rows, "scale", {"a"}, {x}, [](const std::vector<Var<T>>& v) { scale(v[0], T(2)); }, other,
      stale);
  add_handle_rows<T>(
      rows, "sum", {"x"}, {x}, [](const std::vector<Var<T>>& v) { sum(v[0]); }, other, stale);
  add_handle_rows<T>(
      rows, "mean", {"x"}, {x}, [](const std::vector<Var<T>>& v) { mean(v[0]); }, other, stale);

  // mse does not broadcast
  bad("mse: target transposed", [&] { mse(x, m32); }, IA,
      {"mse", "'target'", "[3, 2]", "expected [2, 3]"});
  bad("mse: a target that would broadcast", [&] { mse(x, v3); }, IA,
      {"mse", "'target'", "[3]", "[2, 3]", "does not broadcast"});
  add_handle_rows<T>(
      rows, "mse", {"prediction", "target"}, {x, x2},
      [](const std::vector<Var<T>>& v) { mse(v[0], v[1]); }, other, stale);

  // The Tape API
  bad("backward(y): y with more than one element", [&] { tape.backward(y); }, LE,
      {"Tape::backward", "[2, 4]", "one-element y", "backward(y, dy)"});
  bad("backward(y, dy): dy of another shape",
      [&] {
        tape.backward(y, xt::ones<T>({4, 2}));
      },
      IA, {"Tape::backward", "'dy'", "[4, 2]", "expected [2, 4]"});
  bad("backward(y, dy): dy of another rank", [&] { tape.backward(y, xt::ones<T>({8})); }, IA,
      {"Tape::backward", "'dy'", "[8]", "expected [2, 4]"});
  bad("backward(y, dy): a [1]-shaped dy for a 0-d y",
      [&] { tape.backward(y_scalar, xt::ones<T>({1})); }, IA,
      {"Tape::backward", "'dy'", "[1]", "expected []"});
  bad("backward: y needs no gradient",
      [&] {
        tape.backward(y_data, xt::ones<T>({2, 3}));
      },
      LE, {"Tape::backward", "does not require a gradient"});
  bad("backward: y recorded with recording off",
      [&] {
        tape.backward(y_nograd, xt::ones<T>({2, 4}));
      },
      LE, {"Tape::backward", "does not require a gradient", "recording off"});
  bad("backward: an empty y", [&] { tape.backward(empty); }, LE,
      {"Tape::backward", "'y'", "empty Var handle"});
  bad("backward: y of a cleared tape", [&] { tape.backward(stale); }, LE,
      {"Tape::backward", "'y'", "cleared"});
  bad("backward: y of another tape", [&] { other.backward(y_scalar); }, LE,
      {"Tape::backward", "'y'", "different tape"});
  bad("backward(y, dy): y of another tape",
      [&] {
        other.backward(y, xt::ones<T>({2, 4}));
      },
      LE, {"Tape::backward", "'y'", "different tape"});
  rows.push_back({"backward: a Parameter changed shape since it was recorded",
                  [&] { tape.backward(y_scalar); },
                  LE,
                  {"Tape::backward", "Parameter 'p'", "[4, 3]", "[2, 6]", "record"},
                  [&] {
                    p.value.reshape({2, 6});
                  },
                  [&] {
                    p.value.reshape({4, 3});
                  }});
  const std::vector<std::pair<std::string, std::function<void(const Var<T>&)>>> accessors = {
      {"Var::value", [](const Var<T>& v) { v.value(); }},
      {"Var::grad", [](const Var<T>& v) { v.grad(); }},
      {"Var::shape", [](const Var<T>& v) { v.shape(); }},
      {"Var::size", [](const Var<T>& v) { v.size(); }},
      {"Var::dimension", [](const Var<T>& v) { v.dimension(); }},
      {"Var::requires_grad", [](const Var<T>& v) { v.requires_grad(); }},
      {"Var::tape", [](const Var<T>& v) { v.tape(); }},
  };
  for (const auto& [fn, access] : accessors) {
    bad(fn + " of an empty Var", [&, access = access] { access(empty); }, LE,
        {fn, "empty Var handle"});
    bad(fn + " of a Var of a cleared tape", [&, access = access] { access(stale); }, LE,
        {fn, "cleared"});
  }

  // Activation names
  bad("parse_activation: wrong case", [] { parse_activation("ReLU"); }, IA,
      {"parse_activation", "'ReLU'", "relu, gelu, gelu_tanh, gelu_sigmoid, silu, tanh"});
  bad("parse_activation: empty name", [] { parse_activation(""); }, IA,
      {"parse_activation", "''", "valid names"});
  bad("parse_activation: trailing space", [] { parse_activation("gelu "); }, IA,
      {"parse_activation", "'gelu '"});
  bad("parse_activation: another library's name", [] { parse_activation("swish"); }, IA,
      {"parse_activation", "'swish'", "silu"});
  bad("to_string: an Activation outside the enumeration",
      [] { to_string(static_cast<Activation>(6)); }, IA, {"to_string", "Activation(6)"});

  report("engine", run_rows(rows, snapshot));
}

TEST_CASE("bad input: gradcheck options and functions") {
  const std::vector<xt::xarray<double>> inputs = {random_array({2, 3}, 1)};
  const GradcheckFunction f = [](const std::vector<Var<double>>& v) { return sum(v[0]); };
  Tape<double> elsewhere;
  const Var<double> foreign = elsewhere.leaf(xt::xarray<double>{1.0});
  auto options = [](double eps, double atol, double rtol) {
    GradcheckOptions o;
    o.eps = eps;
    o.atol = atol;
    o.rtol = rtol;
    return o;
  };
  std::vector<Row> rows;
  const auto IA = Expect::invalid_argument;
  for (const auto& [label, o, arg, value] :
       std::vector<std::tuple<std::string, GradcheckOptions, std::string, std::string>>{
           {"eps = 0", options(0, 1e-5, 1e-3), "eps", "0"},
           {"eps < 0", options(-1e-6, 1e-5, 1e-3), "eps", "-1e-06"},
           {"eps NaN", options(k_nan, 1e-5, 1e-3), "eps", "nan"},
           {"eps infinite", options(k_inf, 1e-5, 1e-3), "eps", "inf"},
           {"atol < 0", options(1e-6, -1, 1e-3), "atol", "-1"},
           {"atol NaN", options(1e-6, k_nan, 1e-3), "atol", "nan"},
           {"rtol < 0", options(1e-6, 1e-5, -0.5), "rtol", "-0.5"},
           {"rtol NaN", options(1e-6, 1e-5, k_nan), "rtol", "nan"},
       })
    rows.push_back({"gradcheck: " + label,
                    [&, o = o] { gradcheck(f, inputs, o); },
                    IA,
                    {"gradcheck", arg, value}});
  rows.push_back(
      {"gradcheck: f records on another tape",
       [&] { gradcheck([&](const std::vector<Var<double>>&) { return foreign; }, inputs); },
       Expect::logic_error,
       {"gradcheck", "f must record on the tape of its arguments"}});
  rows.push_back(
      {"gradcheck: f returns an empty Var",
       [&] { gradcheck([](const std::vector<Var<double>>&) { return Var<double>(); }, inputs); },
       Expect::logic_error,
       {"empty Var handle"}});
  auto snapshot = [&] {
    State s;
    for (const auto& input : inputs) s.add(input);
    s.add(elsewhere.size());
    return s;
  };
  report("gradcheck", run_rows(rows, snapshot));
}

// Sizes computed from the arguments: a product or sum that wraps around
// std::size_t, or a result past the machine's memory, is refused before
// anything is recorded (engine/checked_size.hpp).
TEST_CASE_TEMPLATE("bad input: sizes that overflow or exceed memory", T, float, double) {
  constexpr std::size_t k_2_32 = std::size_t{1} << 32, k_2_40 = std::size_t{1} << 40;
  constexpr std::int64_t k_int64_max = std::numeric_limits<std::int64_t>::max();
  Tape<T> tape;
  const Var<T> x1 = tape.leaf(xt::xarray<T>{T(1)});                       // [1]
  const Var<T> x11 = tape.leaf(xt::xarray<T>(xt::ones<T>(Shape{1, 1})));  // [1, 1]
  const Var<T> x3 = tape.leaf(xt::xarray<T>{T(1), T(2), T(3)});           // [3]
  const Var<T> none = tape.leaf(xt::xarray<T>(xt::zeros<T>({2, 0})));     // [2, 0]
  const Var<T> tall = tape.leaf(xt::xarray<T>(xt::zeros<T>(Shape{std::size_t{1} << 62, 0})));
  // A column and a row of 2^20 each: their broadcast or product has 2^40 elements.
  constexpr std::size_t k_2_20 = std::size_t{1} << 20;
  const Var<T> column = tape.leaf(xt::xarray<T>(xt::zeros<T>(Shape{k_2_20, 1})));
  const Var<T> row = tape.leaf(xt::xarray<T>(xt::zeros<T>(Shape{1, k_2_20})));
  const Indices zeros = xt::zeros<std::int64_t>(Shape{k_2_20});
  const xt::xarray<bool> cond = xt::zeros<bool>(Shape{k_2_20, 1});
  const Indices lengths = {0, 1, 2};
  const auto snapshot = snapshot_of<T>({&tape}, {x1, x11, x3, none, tall, column, row});
  std::vector<Row> rows;
  const auto bad = row_adder(rows);
  const auto IA = Expect::invalid_argument;
  const std::string overflows = "overflows std::size_t (at most 18446744073709551615)";
  const std::string too_many = "overflows std::ptrdiff_t (at most 9223372036854775807)";

  bad("causal_mask: rows * cols = 2^64", [] { causal_mask(k_2_32, k_2_32); }, IA,
      {"xtgrad::causal_mask: arguments 'rows' and 'cols': the shape [4294967296, 4294967296] of "
       "18446744073709551616 elements",
       too_many});
  bad("causal_mask: 2^60 bytes", [] { causal_mask(k_2_40, std::size_t{1} << 20); }, IA,
      {"causal_mask", "'rows' and 'cols'", "1152921504606846976 bytes, more than the"});
  bad("length_mask: 3 * 2^63", [&] { length_mask(lengths, std::size_t{1} << 63); }, IA,
      {"length_mask", "'lengths' and 'max_length'", "27670116110564327424 elements", too_many});
  bad("length_mask: 3 * 2^40 bytes", [&] { length_mask(lengths, k_2_40); }, IA,
      {"length_mask", "'lengths' and 'max_length'", "3298534883328 bytes, more than the"});
  bad("split: sizes summing to 2^64 + 1",
      [&] {
        split(x1, {k_int64_max, k_int64_max, 3}, 0);
      },
      IA,
      {"xtgrad::split: argument 'split_sizes': the sum of [9223372036854775807, "
       "9223372036854775807, 3] = 18446744073709551617",
       overflows});
  bad("split: sizes summing to 2^64 + 3 along an axis of 3",
      [&] {
        split(x3, {k_int64_max, k_int64_max, 5}, 0);
      },
      IA, {"split", "'split_sizes'", overflows});
  bad("expand: to 2^64 elements",
      [&] {
        expand(x11, {std::int64_t(k_2_32), std::int64_t(k_2_32)});
      },
      IA, {"expand", "argument 'shape'", "[4294967296, 4294967296]", too_many});
  bad("expand: a new axis of 2^64",
      [&] {
        expand(x1, {std::int64_t(k_2_32), std::int64_t(k_2_32), 1});
      },
      IA, {"expand", "argument 'shape'", too_many});
  bad("expand: to 2^40 elements", [&] { expand(x1, {std::int64_t(k_2_40)}); }, IA,
      {"expand", "argument 'shape'", "the shape [1099511627776] of 1099511627776 elements of",
       "bytes, more than the"});
  bad("reshape: [2^62, 4] of a 0-element x",
      [&] {
        reshape(none, {std::int64_t{1} << 62, 4});
      },
      IA,
      {"xtgrad::reshape: argument 'shape': the shape [4611686018427387904, 4] of "
       "18446744073709551616 elements",
       too_many});
  bad("reshape: [2^62, -1, 8] of a 0-element x",
      [&] {
        reshape(none, {std::int64_t{1} << 62, -1, 8});
      },
      IA, {"reshape", "'shape'", too_many});
  bad("concat: 8 axes of 2^62 along dim 0", [&] { concat(std::vector<Var<T>>(8, tall), 0); }, IA,
      {"concat", "argument 'xs'", "13835058055282163712 + 4611686018427387904", overflows});

  const std::string past_memory = "[1048576, 1048576] of 1099511627776 elements of";
  bad("add: a column and a row of 2^20", [&] { add(column, row); }, IA,
      {"xtgrad::add: arguments 'a' and 'b': the shape " + past_memory, "bytes, more than the"});
  bad("mul: a row and a column of 2^20", [&] { mul(row, column); }, IA,
      {"mul", "arguments 'a' and 'b'", past_memory});
  bad("where: a column condition and a row", [&] { xtgrad::where(cond, row, x1); }, IA,
      {"where", "arguments 'cond', 'a' and 'b'", past_memory});
  bad("matmul: [2^20, 1] . [1, 2^20]", [&] { matmul(column, row); }, IA,
      {"matmul", "arguments 'a' and 'b'", past_memory});
  bad("index_select: 2^20 rows of 2^20", [&] { index_select(row, 0, zeros); }, IA,
      {"index_select", "arguments 'x' and 'index'", past_memory});
  bad("embedding: 2^20 rows of 2^20", [&] { embedding(zeros, row); }, IA,
      {"embedding", "arguments 'indices' and 'weight'", past_memory});

  report("sizes", run_rows(rows, snapshot));
}

TEST_CASE("checked sizes: the helpers' messages, and OutOfMemoryError") {
  using namespace xtgrad::detail;
  const auto message_of = [](const auto& call) -> std::string {
    try {
      call();
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "(no exception)";
  };
  CHECK(checked_multiply("f", "arguments 'a' and 'b'", 3, 5) == 15);
  CHECK(checked_add("f", "arguments 'a' and 'b'", 3, 5) == 8);
  CHECK(checked_sum("f", "argument 'sizes'", {1, 2, 3}) == 6);
  CHECK(element_count("f", "argument 'shape'", std::vector<std::size_t>{2, 3, 4}) == 24);
  CHECK(element_count("f", "argument 'shape'", std::vector<std::size_t>{}) == 1);
  CHECK(element_count("f", "argument 'shape'", {std::size_t{1} << 62, 0, 0}) == 0);
  CHECK(message_of([] {
          element_count("f", "argument 'shape'", {0, std::size_t{1} << 63});
        }) ==
        "xtgrad::f: argument 'shape': the shape [0, 9223372036854775808] of no elements overflows "
        "std::ptrdiff_t (at most 9223372036854775807) in its strides: its nonzero sizes multiply "
        "to 9223372036854775808");
  CHECK(checked_allocation<float>("f", "argument 'shape'", {2, 3}) == 6);
  CHECK(max_allocation_bytes() > 0);
  CHECK(max_allocation_bytes() <= std::size_t(std::numeric_limits<std::ptrdiff_t>::max()));
  CHECK(message_of([] { checked_multiply("f", "arguments 'a' and 'b'", SIZE_MAX, 2); }) ==
        "xtgrad::f: arguments 'a' and 'b': 18446744073709551615 * 2 = 36893488147419103230 "
        "overflows std::size_t (at most 18446744073709551615)");
  CHECK(message_of([] { checked_add("f", "arguments 'a' and 'b'", SIZE_MAX, 1); }) ==
        "xtgrad::f: arguments 'a' and 'b': 18446744073709551615 + 1 = 18446744073709551616 "
        "overflows std::size_t (at most 18446744073709551615)");
  CHECK(message_of([] {
          element_count("f", "argument 'shape'", {SIZE_MAX, SIZE_MAX, SIZE_MAX});
        }) ==
        "xtgrad::f: argument 'shape': the shape [18446744073709551615, 18446744073709551615, "
        "18446744073709551615] of at least 340282366920938463463374607431768211455 elements "
        "overflows std::ptrdiff_t (at most 9223372036854775807)");
  const std::string bound = std::to_string(max_allocation_bytes());
  const bool physical =
      max_allocation_bytes() < std::size_t(std::numeric_limits<std::ptrdiff_t>::max());
  CHECK(
      message_of([] { check_bytes("f", "argument 'n'", "parameters", std::size_t{1} << 62, 8); }) ==
      "xtgrad::f: argument 'n': parameters of 4611686018427387904 elements of 8 bytes each = "
      "36893488147419103232 bytes, more than the " +
          bound +
          (physical ? " bytes of this machine's physical memory"
                    : " bytes one allocation can hold"));
  try {
    rethrow_out_of_memory("M", "parameters", 1000, 4, std::bad_alloc());
    FAIL("rethrow_out_of_memory returned");
  } catch (const std::bad_alloc& e) {
    CHECK(typeid(e) == typeid(OutOfMemoryError));
    CHECK(std::string(e.what()) ==
          "xtgrad::M: out of memory allocating parameters of 1000 elements of 4 bytes each = "
          "4000 bytes (std::bad_alloc)");
  }
}
