// The bad-input table of issue 6, item 1: every public function and
// constructor against wrong ranks, a wrong size in each argument in turn,
// empty and stale handles, Vars of two tapes, unknown activations, zero sizes
// and out-of-range hyperparameters. Each row must throw exactly the
// documented exception type (not a subclass, not a base) with a message
// naming the function, the argument and what was expected, and a snapshot
// of everything the call could touch (input values and gradients, tape
// sizes, Parameters, optimizer state and learning rate, files) must be
// bit-identical before and after.
//
// The rows are data: a label, the call, the expected type and the parts
// its message must contain. Each test case reports its row count.

#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iterator>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <typeinfo>
#include <vector>

#include <xtensor/xtensor.hpp>
#include <xtgrad/engine/engine.hpp>
#include <xtgrad/modules/modules.hpp>
#include <xtgrad/optim/optim.hpp>

#include "hardening/fuzz/harness.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using xtgrad::testing::random_array;
using xtgrad::testing::TempDir;
namespace fs = std::filesystem;

namespace {

constexpr double k_nan = std::numeric_limits<double>::quiet_NaN();
constexpr double k_inf = std::numeric_limits<double>::infinity();

// ---------------------------------------------------------------- the table runner

enum class Expect { invalid_argument, logic_error, runtime_error, out_of_range };

std::string name_of(Expect e) {
  switch (e) {
    case Expect::invalid_argument:
      return "std::invalid_argument";
    case Expect::logic_error:
      return "std::logic_error";
    case Expect::runtime_error:
      return "std::runtime_error";
    case Expect::out_of_range:
      return "std::out_of_range";
  }
  return "?";
}

// The exact dynamic type: std::invalid_argument is a std::logic_error, so a
// catch clause alone cannot tell them apart.
bool is_exactly(const std::exception& e, Expect expected) {
  switch (expected) {
    case Expect::invalid_argument:
      return typeid(e) == typeid(std::invalid_argument);
    case Expect::logic_error:
      return typeid(e) == typeid(std::logic_error);
    case Expect::runtime_error:
      return typeid(e) == typeid(std::runtime_error);
    case Expect::out_of_range:
      return typeid(e) == typeid(std::out_of_range);
  }
  return false;
}

std::string dynamic_name(const std::exception& e) {
  if (typeid(e) == typeid(std::invalid_argument)) return "std::invalid_argument";
  if (typeid(e) == typeid(std::logic_error)) return "std::logic_error";
  if (typeid(e) == typeid(std::runtime_error)) return "std::runtime_error";
  if (typeid(e) == typeid(std::out_of_range)) return "std::out_of_range";
  return typeid(e).name();
}

struct Row {
  std::string label;
  std::function<void()> call;
  Expect expect;
  std::vector<std::string> parts;  // each must appear in what()
  // Optional: puts the misuse in place before the snapshot, and undoes it after.
  std::function<void()> setup = nullptr;
  std::function<void()> teardown = nullptr;
};

// Everything a failed call must leave alone, as comparable bytes.
class State {
 public:
  template <class T>
  void add(const xt::xarray<T>& a) {
    std::string item(reinterpret_cast<const char*>(a.shape().data()),
                     a.shape().size() * sizeof(std::size_t));
    item += '|';
    if (a.size() > 0) item.append(reinterpret_cast<const char*>(a.data()), a.size() * sizeof(T));
    items_.push_back(std::move(item));
  }
  template <class T>
  void add(const Parameter<T>& p) {
    items_.push_back(p.name + (p.has_grad ? "+grad" : "-grad"));
    add(p.value);
    add(p.grad);
  }
  // A live Var: its value and gradient (leaves only: an intermediate's
  // gradient is scratch space that the next backward rewrites).
  template <class T>
  void add(const Var<T>& v) {
    add(v.value());
    add(v.grad());
  }
  void add(double x) { items_.push_back("d" + std::to_string(x)); }
  void add(std::size_t n) { items_.push_back("n" + std::to_string(n)); }
  void add(const std::string& s) { items_.push_back("s" + s); }
  bool operator==(const State& other) const { return items_ == other.items_; }

 private:
  std::vector<std::string> items_;
};

// Runs every row; returns how many ran.
std::size_t run_rows(const std::vector<Row>& rows, const std::function<State()>& snapshot) {
  for (const Row& row : rows) {
    INFO("row: " << row.label);
    if (row.setup) row.setup();
    const State before = snapshot();
    bool thrown = false;
    try {
      row.call();
    } catch (const std::exception& e) {
      thrown = true;
      const std::string what = e.what();
      INFO("threw " << dynamic_name(e) << ": " << what);
      CHECK_MESSAGE(is_exactly(e, row.expect), "expected exactly " << name_of(row.expect));
      for (const std::string& part : row.parts)
        CHECK_MESSAGE(what.find(part) != std::string::npos, "message lacks \"" << part << "\"");
    } catch (...) {
      thrown = true;
      FAIL_CHECK("threw something that is not a std::exception");
    }
    CHECK_MESSAGE(thrown, "did not throw (expected " << name_of(row.expect) << ")");
    CHECK_MESSAGE(snapshot() == before, "the call changed its inputs or state");
    if (row.teardown) row.teardown();
  }
  return rows.size();
}

std::string q(const std::string& arg) {
  return "'" + arg + "'";
}

// For a function of several Vars: one row per argument with an empty handle,
// one with a handle of a cleared tape and (with two or more Vars) one with a
// Var of another tape. `call` receives the arguments, one of them replaced.
template <class T>
void add_handle_rows(std::vector<Row>& rows, const std::string& fn,
                     const std::vector<std::string>& names, const std::vector<Var<T>>& good,
                     std::function<void(const std::vector<Var<T>>&)> call, Tape<T>& other,
                     const Var<T>& stale) {
  for (std::size_t i = 0; i < good.size(); ++i) {
    auto with = [good, call, i](Var<T> replacement) {
      return [good, call, i, replacement] {
        std::vector<Var<T>> args = good;
        args[i] = replacement;
        call(args);
      };
    };
    rows.push_back({fn + ": empty Var as " + names[i],
                    with(Var<T>()),
                    Expect::logic_error,
                    {fn, q(names[i]), "empty Var handle"}});
    rows.push_back({fn + ": Var of a cleared tape as " + names[i],
                    with(stale),
                    Expect::logic_error,
                    {fn, q(names[i]), "cleared", "record the computation"}});
    if (good.size() > 1)
      rows.push_back({fn + ": Var of another tape as " + names[i],
                      with(other.leaf(good[i].value())),
                      Expect::logic_error,
                      {fn, q(names[i]), "different tapes"}});
  }
}

template <class T>
std::optional<Var<T>> opt(const Var<T>& v) {
  return v;
}

void report(const std::string& table, std::size_t rows) {
  MESSAGE(table << ": " << rows << " bad-input cases");
}

std::vector<std::string> directory_listing(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::recursive_directory_iterator(dir))
    names.push_back(entry.path().lexically_relative(dir).string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

// ---------------------------------------------------------------- engine

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
  const auto bad = [&](std::string label, std::function<void()> call, Expect e,
                       std::vector<std::string> parts) {
    rows.push_back({std::move(label), std::move(call), e, std::move(parts)});
  };
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
      {"activation", "'a'", "Activation(7)", "relu, gelu, gelu_tanh, gelu_sigmoid, silu"});
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
      {"parse_activation", "'ReLU'", "relu, gelu, gelu_tanh, gelu_sigmoid, silu"});
  bad("parse_activation: empty name", [] { parse_activation(""); }, IA,
      {"parse_activation", "''", "valid names"});
  bad("parse_activation: trailing space", [] { parse_activation("gelu "); }, IA,
      {"parse_activation", "'gelu '"});
  bad("parse_activation: another library's name", [] { parse_activation("swish"); }, IA,
      {"parse_activation", "'swish'", "silu"});
  bad("to_string: an Activation outside the enumeration",
      [] { to_string(static_cast<Activation>(5)); }, IA, {"to_string", "Activation(5)"});

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

// ---------------------------------------------------------------- functional API

TEST_CASE_TEMPLATE("bad input: the functional API", T, float, double) {
  Tape<T> tape, other, cleared;
  const Var<T> stale = cleared.leaf(xt::xarray<T>{1});
  cleared.clear();
  // D = 4, H = 6, Cout = 3; every misfit below differs from the fit in one place.
  Var<T> x = tape.leaf(random_array<T>({2, 4}, 1));
  Var<T> w1 = tape.leaf(random_array<T>({6, 4}, 2)), b1 = tape.leaf(random_array<T>({6}, 3));
  Var<T> w2 = tape.leaf(random_array<T>({4, 6}, 4)), b2 = tape.leaf(random_array<T>({4}, 5));
  Var<T> w_up = tape.leaf(random_array<T>({4, 6}, 6)),
         w_gate = tape.leaf(random_array<T>({4, 6}, 7));
  Var<T> w_down = tape.leaf(random_array<T>({6, 3}, 8)),
         b_down = tape.leaf(random_array<T>({3}, 9));
  Var<T> x5 = tape.leaf(random_array<T>({2, 5}, 10)), x0 = tape.leaf(xt::xarray<T>(T(1)));
  Var<T> v5 = tape.leaf(random_array<T>({5}, 11)), v7 = tape.leaf(random_array<T>({7}, 12));
  Var<T> m16 = tape.leaf(random_array<T>({1, 6}, 13)), m64 = tape.leaf(random_array<T>({6, 4}, 14));
  Var<T> m47 = tape.leaf(random_array<T>({4, 7}, 15)), m14 = tape.leaf(random_array<T>({1, 4}, 16));
  Var<T> m46 = tape.leaf(random_array<T>({4, 6}, 17)), m45 = tape.leaf(random_array<T>({4, 5}, 18));
  Var<T> m53 = tape.leaf(random_array<T>({5, 3}, 19)),
         c3 = tape.leaf(random_array<T>({6, 4, 1}, 20));
  tape.backward(sum(positionwise_ffn(x, w1, b1, w2, b2)));
  const std::vector<Var<T>> leaves = {x,  w1, b1,  w2,  b2,  w_up, w_gate, w_down, b_down, x5, x0,
                                      v5, v7, m16, m64, m47, m14,  m46,    m45,    m53,    c3};
  auto snapshot = [&] {
    State s;
    s.add(tape.size());
    s.add(other.size());
    for (const Var<T>& v : leaves) s.add(v);
    return s;
  };
  std::vector<Row> rows;
  const auto IA = Expect::invalid_argument;

  using TwoLayer =
      Var<T> (*)(const Var<T>&, const Var<T>&, const Var<T>&, const Var<T>&, const Var<T>&);
  const std::vector<std::pair<std::string, TwoLayer>> two_layer = {
      {"positionwise_ffn", &positionwise_ffn<T>},
      {"feedforward_sublayer", &feedforward_sublayer<T>}};
  for (const auto& [fn, f] : two_layer) {
    const bool pw = fn == "positionwise_ffn";
    const std::string n_w1 = pw ? "w1" : "weight1", n_b1 = pw ? "b1" : "bias1";
    const std::string n_w2 = pw ? "w2" : "weight2", n_b2 = pw ? "b2" : "bias2";
    const auto row = [&, fn = fn, f = f](std::string label, std::vector<Var<T>> a, std::string arg,
                                         std::string got, std::string expected) {
      rows.push_back({fn + ": " + label,
                      [f, a] { f(a[0], a[1], a[2], a[3], a[4]); },
                      IA,
                      {fn, q(arg), got, expected}});
    };
    row("x of the wrong width", {x5, w1, b1, w2, b2}, "x", "[2, 5]", "expected [..., 4]");
    row("0-d x", {x0, w1, b1, w2, b2}, "x", "[]", "expected [..., 4]");
    row("1-d first weight", {x, b1, b1, w2, b2}, n_w1, "[6]", "expected [H, D]");
    row("3-d first weight", {x, c3, b1, w2, b2}, n_w1, "[6, 4, 1]", "expected [H, D]");
    row("first bias of the wrong size", {x, w1, v7, w2, b2}, n_b1, "[7]", "expected [6]");
    row("2-d first bias", {x, w1, m16, w2, b2}, n_b1, "[1, 6]", "expected [6]");
    row("second weight transposed", {x, w1, b1, m64, b2}, n_w2, "[6, 4]", "expected [4, 6]");
    row("second weight of the wrong width", {x, w1, b1, m47, b2}, n_w2, "[4, 7]",
        "expected [4, 6]");
    row("second bias of the wrong size", {x, w1, b1, w2, v5}, n_b2, "[5]", "expected [4]");
    row("2-d second bias", {x, w1, b1, w2, m14}, n_b2, "[1, 4]", "expected [4]");
    add_handle_rows<T>(
        rows, fn, {"x", n_w1, n_b1, n_w2, n_b2}, {x, w1, b1, w2, b2},
        [f = f](const std::vector<Var<T>>& a) { f(a[0], a[1], a[2], a[3], a[4]); }, other, stale);
  }
  rows.push_back({"feedforward: an Activation outside the enumeration",
                  [&] { feedforward(x, w1, b1, w2, b2, static_cast<Activation>(9)); },
                  IA,
                  {"feedforward", "'activation'", "Activation(9)"}});
  rows.push_back({"feedforward: x of the wrong width",
                  [&] { feedforward(x5, w1, b1, w2, b2, Activation::silu); },
                  IA,
                  {"feedforward", "'x'", "[2, 5]", "expected [..., 4]"}});

  const std::optional<Var<T>> none;
  const auto gated_row = [&](std::string label, std::vector<Var<T>> a,
                             std::vector<std::optional<Var<T>>> biases, std::string arg,
                             std::string got, std::string expected) {
    rows.push_back({"gated_feedforward: " + label,
                    [a, biases] {
                      gated_feedforward(a[0], a[1], a[2], a[3], biases[0], biases[1], biases[2]);
                    },
                    IA,
                    {"gated_feedforward", q(arg), got, expected}});
  };
  gated_row("x of the wrong width", {x5, w_up, w_gate, w_down}, {none, none, none}, "x", "[2, 5]",
            "expected [..., 4]");
  gated_row("0-d x", {x0, w_up, w_gate, w_down}, {none, none, none}, "x", "[]",
            "expected [..., 4]");
  gated_row("1-d w_up", {x, b1, w_gate, w_down}, {none, none, none}, "w_up", "[6]",
            "expected [Cin, H]");
  gated_row("w_up in PyTorch's layout", {x, m64, w_gate, w_down}, {none, none, none}, "x", "[2, 4]",
            "expected [..., 6]");
  gated_row("w_gate of the wrong width", {x, w_up, m45, w_down}, {none, none, none}, "w_gate",
            "[4, 5]", "expected [4, 6]");
  gated_row("w_gate transposed", {x, w_up, m64, w_down}, {none, none, none}, "w_gate", "[6, 4]",
            "expected [4, 6]");
  gated_row("1-d w_down", {x, w_up, w_gate, b_down}, {none, none, none}, "w_down", "[3]",
            "expected [H, Cout]");
  gated_row("w_down of the wrong height", {x, w_up, w_gate, m53}, {none, none, none}, "w_down",
            "[5, 3]", "expected [6, Cout]");
  gated_row("b_up of the wrong size", {x, w_up, w_gate, w_down}, {v5, none, none}, "b_up", "[5]",
            "expected [6]");
  gated_row("b_gate 2-d", {x, w_up, w_gate, w_down}, {none, m16, none}, "b_gate", "[1, 6]",
            "expected [6]");
  gated_row("b_down of the wrong size", {x, w_up, w_gate, w_down}, {none, none, b2}, "b_down",
            "[4]", "expected [3]");
  add_handle_rows<T>(
      rows, "gated_feedforward", {"x", "w_up", "w_gate", "w_down", "b_up", "b_gate", "b_down"},
      {x, w_up, w_gate, w_down, b1, b1, b_down},
      [](const std::vector<Var<T>>& a) {
        gated_feedforward(a[0], a[1], a[2], a[3], opt(a[4]), opt(a[5]), opt(a[6]));
      },
      other, stale);
  rows.push_back({"gated_feedforward: an unknown activation name",
                  [&] { gated_feedforward(x, w_up, w_gate, w_down, none, none, none, "swish"); },
                  IA,
                  {"gated_feedforward", "'activation'", "'swish'", "relu, gelu"}});
  rows.push_back({"gated_feedforward: an Activation outside the enumeration",
                  [&] {
                    gated_feedforward(x, w_up, w_gate, w_down, none, none, none,
                                      static_cast<Activation>(9));
                  },
                  IA,
                  {"gated_feedforward", "'activation'", "Activation(9)"}});

  report("functional", run_rows(rows, snapshot));
}

// ---------------------------------------------------------------- modules

TEST_CASE_TEMPLATE("bad input: module constructors, forwards, save and load", T, float, double) {
  Linear<T> lin(3, 4);
  FeedForward<T> ff(4, 8);
  PositionwiseFFN<T> pw(4, 8);
  GatedFFN<T> gf(4, 6, 3, Activation::silu, GatedBias::all());
  Tape<T> tape, cleared;
  const Var<T> stale = cleared.leaf(xt::xarray<T>{1});
  cleared.clear();
  Var<T> x3 = tape.leaf(random_array<T>({2, 3}, 1));
  Var<T> x4 = tape.leaf(random_array<T>({2, 4}, 2));
  Var<T> x5 = tape.leaf(random_array<T>({2, 5}, 3));
  Var<T> x0 = tape.leaf(xt::xarray<T>(T(1)));
  tape.backward(sum(lin(x3)) + sum(gf(x4)) + sum(ff(x4)) + sum(pw(x4)));  // gradients everywhere

  TempDir dir("bad-input");
  const fs::path ckpt = dir / "ckpt";
  lin.save(ckpt);
  Linear<T>(3, 5).save(dir / "wide");
  ff.save(dir / "ff");
  using Other = std::conditional_t<std::is_same_v<T, float>, double, float>;
  Linear<Other>(3, 4).save(dir / "other_dtype");
  fs::create_directory(dir / "empty");
  std::ofstream(dir / "file") << "not a checkpoint";

  auto snapshot = [&] {
    State s;
    for (Module<T>* m : std::vector<Module<T>*>{&lin, &ff, &pw, &gf})
      for (Parameter<T>* p : m->parameters()) s.add(*p);
    for (const Var<T>& v : {x3, x4, x5, x0}) s.add(v);
    for (const std::string& name : directory_listing(dir.path())) s.add(name);
    return s;
  };
  std::vector<Row> rows;
  const auto IA = Expect::invalid_argument;
  const auto LE = Expect::logic_error;
  const auto RE = Expect::runtime_error;
  const auto bad = [&](std::string label, std::function<void()> call, Expect e,
                       std::vector<std::string> parts) {
    rows.push_back({std::move(label), std::move(call), e, std::move(parts)});
  };

  // Constructors: a zero size in each argument in turn, an invalid activation.
  Generator generator(1);
  bad("Linear(0, 4)", [] { Linear<T>(0, 4); }, IA, {"Linear", "'in_features'", "0", "positive"});
  bad("Linear(3, 0)", [] { Linear<T>(3, 0); }, IA, {"Linear", "'out_features'", "0", "positive"});
  bad("Linear(0, 4, true, generator)", [&] { Linear<T>(0, 4, true, generator); }, IA,
      {"Linear", "'in_features'"});
  bad("Linear(3, 0, false)", [] { Linear<T>(3, 0, false); }, IA, {"Linear", "'out_features'"});
  bad("FeedForward(0, 8)", [] { FeedForward<T>(0, 8); }, IA,
      {"FeedForward", "'d_model'", "0", "positive"});
  bad("FeedForward(4, 0)", [] { FeedForward<T>(4, 0); }, IA,
      {"FeedForward", "'d_ff'", "0", "positive"});
  bad("FeedForward(4, 8, Activation(9))", [] { FeedForward<T>(4, 8, static_cast<Activation>(9)); },
      IA, {"FeedForward", "'activation'", "Activation(9)"});
  bad("FeedForward(4, 8, Activation(9), generator)",
      [&] { FeedForward<T>(4, 8, static_cast<Activation>(9), generator); }, IA,
      {"FeedForward", "'activation'", "Activation(9)"});
  bad("PositionwiseFFN(0, 8)", [] { PositionwiseFFN<T>(0, 8); }, IA,
      {"PositionwiseFFN", "'d_model'", "0", "positive"});
  bad("PositionwiseFFN(4, 0, generator)", [&] { PositionwiseFFN<T>(4, 0, generator); }, IA,
      {"PositionwiseFFN", "'d_ff'", "0", "positive"});
  bad("GatedFFN(0, 6, 3)", [] { GatedFFN<T>(0, 6, 3); }, IA,
      {"GatedFFN", "'d_in'", "0", "positive"});
  bad("GatedFFN(4, 0, 3)", [] { GatedFFN<T>(4, 0, 3); }, IA,
      {"GatedFFN", "'d_hidden'", "0", "positive"});
  bad("GatedFFN(4, 6, 0)", [] { GatedFFN<T>(4, 6, 0); }, IA,
      {"GatedFFN", "'d_out'", "0", "positive"});
  bad("GatedFFN::swiglu(4, 0, 3)", [] { GatedFFN<T>::swiglu(4, 0, 3); }, IA,
      {"GatedFFN", "'d_hidden'"});
  bad("GatedFFN::reglu(0, 6, 3)", [] { GatedFFN<T>::reglu(0, 6, 3); }, IA, {"GatedFFN", "'d_in'"});
  bad("GatedFFN(4, 6, 3, Activation(9))", [] { GatedFFN<T>(4, 6, 3, static_cast<Activation>(9)); },
      IA, {"GatedFFN", "'activation'", "Activation(9)"});

  // Forwards: the input's width and handle.
  bad("Linear: x of the wrong width", [&] { lin(x5); }, IA,
      {"linear", "'x'", "[2, 5]", "expected [..., 3]"});
  bad("Linear: 0-d x", [&] { lin(x0); }, IA, {"linear", "'x'", "[]", "expected [..., 3]"});
  bad("Linear: empty x", [&] { lin(Var<T>()); }, LE, {"Linear", "'x'", "empty Var handle"});
  bad("Linear: x of a cleared tape", [&] { lin(stale); }, LE, {"Linear", "'x'", "cleared"});
  bad("FeedForward: x of the wrong width", [&] { ff(x5); }, IA,
      {"feedforward", "'x'", "[2, 5]", "expected [..., 4]"});
  bad("FeedForward: empty x", [&] { ff(Var<T>()); }, LE, {"FeedForward", "'x'", "empty"});
  bad("PositionwiseFFN: x of the wrong width", [&] { pw(x3); }, IA,
      {"feedforward", "'x'", "[2, 3]", "expected [..., 4]"});
  bad("PositionwiseFFN: x of a cleared tape", [&] { pw(stale); }, LE,
      {"FeedForward", "'x'", "cleared"});
  bad("GatedFFN: x of the wrong width", [&] { gf(x5); }, IA,
      {"gated_feedforward", "'x'", "[2, 5]", "expected [..., 4]"});
  bad("GatedFFN: 0-d x", [&] { gf(x0); }, IA, {"gated_feedforward", "'x'", "[]"});
  bad("GatedFFN: empty x", [&] { gf(Var<T>()); }, LE, {"GatedFFN", "'x'", "empty"});

  // save and load (the hostile-file cases are in test_module.cpp and test_npy.cpp)
  bad("save: empty path", [&] { lin.save(""); }, IA, {"Module::save", "path is empty"});
  bad("save: onto a file", [&] { lin.save(dir / "file"); }, IA,
      {"Module::save", "file", "not a directory"});
  bad("save: into a missing parent", [&] { lin.save(dir / "no" / "such"); }, RE,
      {"Module::save", "cannot create"});
  bad("load: a missing directory", [&] { lin.load(dir / "absent"); }, RE,
      {"Module::load", "absent", "No such file"});
  bad("load: a file", [&] { lin.load(dir / "file"); }, IA, {"Module::load", "not a directory"});
  bad("load: an empty directory", [&] { lin.load(dir / "empty"); }, IA,
      {"Module::load", "has no manifest.tsv"});
  bad("load: another shape", [&] { lin.load(dir / "wide"); }, IA,
      {"Module::load", "parameter 'weight'", "[5, 3]", "expects [4, 3]"});
  bad("load: another module", [&] { lin.load(dir / "ff"); }, IA,
      {"Module::load", "missing parameter(s) 'weight', 'bias'", "unexpected parameter(s)"});
  bad("load: a Linear checkpoint into a FeedForward", [&] { ff.load(ckpt); }, IA,
      {"Module::load", "missing parameter(s) 'w1.weight'"});
  bad("load: the other dtype", [&] { lin.load(dir / "other_dtype"); }, IA,
      {"Module::load", "parameter 'weight'", "stores float", "does not convert"});

  report("modules", run_rows(rows, snapshot));
}

// ---------------------------------------------------------------- npy

TEST_CASE_TEMPLATE("bad input: npy files", T, float, double) {
  TempDir dir("bad-npy");
  using Other = std::conditional_t<std::is_same_v<T, float>, double, float>;
  save_npy(dir / "other.npy", xt::xarray<Other>{1, 2});
  const xt::xarray<T> many_axes = xt::zeros<T>(std::vector<std::size_t>(65, 1));
  auto snapshot = [&] {
    State s;
    for (const std::string& name : directory_listing(dir.path())) s.add(name);
    return s;
  };
  const std::vector<Row> rows = {
      {"load_npy: a missing file",
       [&] { load_npy<T>(dir / "absent.npy"); },
       Expect::runtime_error,
       {"load_npy", "absent.npy", "cannot open", "No such file"}},
      {"load_npy: a directory",
       [&] { load_npy<T>(dir.path()); },
       Expect::runtime_error,
       {"load_npy", "Is a directory"}},
      {"load_npy: the other dtype",
       [&] { load_npy<T>(dir / "other.npy"); },
       Expect::invalid_argument,
       {"load_npy", "other.npy", "has dtype", std::string("expected ") + npy_dtype_name<T>()}},
      {"read_npy_header: a missing file",
       [&] { read_npy_header(dir / "absent.npy"); },
       Expect::runtime_error,
       {"read_npy_header", "absent.npy"}},
      {"save_npy: a directory path",
       [&] { save_npy(dir.path() / "", xt::xarray<T>{1}); },
       Expect::invalid_argument,
       {"save_npy", "names a directory", "expected a file path"}},
      {"save_npy: into a missing directory",
       [&] { save_npy(dir / "no" / "x.npy", xt::xarray<T>{1}); },
       Expect::runtime_error,
       {"save_npy", "cannot create"}},
      {"save_npy: more axes than .npy allows",
       [&] { save_npy(dir / "deep.npy", many_axes); },
       Expect::invalid_argument,
       {"save_npy", "65 dimensions", "at most 64"}},
  };
  report("npy", run_rows(rows, snapshot));
}

// ---------------------------------------------------------------- optim

namespace {

// Two parameters with gradients, and each optimizer after one step (so that
// it holds state) with fresh gradients.
template <class T>
struct OptimFixture {
  Parameter<T> p1{"p1", random_array<T>({2, 3}, 1)};
  Parameter<T> p2{"p2", random_array<T>({3}, 2)};
  Parameter<T> saved;  // p2 while a row has changed it
  void save_p2() { saved = p2; }
  void restore_p2() { p2 = saved; }
  void give_gradients(std::uint32_t seed) {
    p1.grad = random_array<T>({2, 3}, seed);
    p2.grad = random_array<T>({3}, seed + 1);
    p1.has_grad = p2.has_grad = true;
  }
};

template <class T, class Opt>
void add_state(State& s, const Opt& o) {
  s.add(o.lr());
  for (std::size_t i = 0; i < o.parameters().size(); ++i) {
    const auto* st = o.state(i);
    if (st == nullptr) {
      s.add(std::string("no state"));
      continue;
    }
    if constexpr (std::is_same_v<std::decay_t<decltype(*st)>, optim::SGDParamState<T>>) {
      s.add(st->momentum_buffer);
    } else {
      s.add(static_cast<std::size_t>(st->step));
      s.add(st->exp_avg);
      s.add(st->exp_avg_sq);
      s.add(st->max_exp_avg_sq);
    }
  }
}

}  // namespace

TEST_CASE_TEMPLATE("bad input: optimizers, clipping and schedules", T, float, double) {
  OptimFixture<T> f;
  std::vector<Parameter<T>*> both = {&f.p1, &f.p2};
  f.give_gradients(10);
  optim::SGD<T> sgd(both, optim::SGDOptions(0.1).momentum(0.9));
  optim::Adam<T> adam(both, optim::AdamOptions(0.01).amsgrad(true));
  optim::AdamW<T> adamw(both, optim::AdamWOptions(0.01));
  sgd.step();
  adam.step();
  adamw.step();
  f.give_gradients(20);

  auto snapshot = [&] {
    State s;
    s.add(f.p1);
    s.add(f.p2);
    add_state<T>(s, sgd);
    add_state<T>(s, adam);
    add_state<T>(s, adamw);
    return s;
  };
  std::vector<Row> rows;
  const auto IA = Expect::invalid_argument;
  const auto bad = [&](std::string label, std::function<void()> call, Expect e,
                       std::vector<std::string> parts) {
    rows.push_back({std::move(label), std::move(call), e, std::move(parts)});
  };

  // Construction: the parameter list, then each hyperparameter in turn.
  for (const std::string name : {"SGD", "Adam", "AdamW"}) {
    auto make = [name](std::vector<Parameter<T>*> params, double lr) {
      if (name == "SGD") optim::SGD<T>(std::move(params), optim::SGDOptions(lr));
      if (name == "Adam") optim::Adam<T>(std::move(params), optim::AdamOptions(lr));
      if (name == "AdamW") optim::AdamW<T>(std::move(params), optim::AdamWOptions(lr));
    };
    bad(name + ": no parameters", [=] { make({}, 0.1); }, IA, {name, "'params'", "is empty"});
    bad(name + ": a null parameter",
        [=, &f] {
          make({&f.p1, nullptr}, 0.1);
        },
        IA, {name, "'params'", "null pointer at position 1"});
    bad(name + ": a parameter twice",
        [=, &f] {
          make({&f.p1, &f.p2, &f.p1}, 0.1);
        },
        IA, {name, "'params'", "'p1' twice", "positions 0 and 2"});
    for (double lr : {-1e-3, k_nan, k_inf})
      bad(name + ": lr " + std::to_string(lr), [=, &both] { make(both, lr); }, IA,
          {name, "'lr'", "finite number >= 0"});
  }
  const auto sgd_row = [&](std::string label, optim::SGDOptions o, std::string arg,
                           std::string expected) {
    bad("SGD: " + label, [&, o] { optim::SGD<T>(both, o); }, IA, {"SGD", q(arg), expected});
  };
  sgd_row("momentum < 0", optim::SGDOptions(0.1).momentum(-0.5), "momentum", "got -0.5");
  sgd_row("momentum NaN", optim::SGDOptions(0.1).momentum(k_nan), "momentum", "finite");
  sgd_row("dampening > 1", optim::SGDOptions(0.1).momentum(0.9).dampening(1.5), "dampening",
          "in [0, 1], got 1.5");
  sgd_row("dampening < 0", optim::SGDOptions(0.1).dampening(-0.1), "dampening", "in [0, 1]");
  sgd_row("weight_decay < 0", optim::SGDOptions(0.1).weight_decay(-1), "weight_decay", "got -1");
  sgd_row("weight_decay infinite", optim::SGDOptions(0.1).weight_decay(k_inf), "weight_decay",
          "finite");
  sgd_row("nesterov without momentum", optim::SGDOptions(0.1).nesterov(true), "nesterov",
          "momentum > 0 and dampening == 0");
  sgd_row("nesterov with dampening",
          optim::SGDOptions(0.1).momentum(0.9).dampening(0.1).nesterov(true), "nesterov",
          "dampening 0.1");
  for (const std::string name : {"Adam", "AdamW"}) {
    const auto adam_row = [&, name](std::string label, double beta1, double beta2, double eps,
                                    double weight_decay, std::string arg, std::string expected) {
      bad(name + ": " + label,
          [=, &both] {
            if (name == "Adam")
              optim::Adam<T>(both, optim::AdamOptions(0.1)
                                       .betas({beta1, beta2})
                                       .eps(eps)
                                       .weight_decay(weight_decay));
            else
              optim::AdamW<T>(both, optim::AdamWOptions(0.1)
                                        .betas({beta1, beta2})
                                        .eps(eps)
                                        .weight_decay(weight_decay));
          },
          IA, {name, q(arg), expected});
    };
    adam_row("beta1 = 1", 1.0, 0.999, 1e-8, 0, "betas[0]", "in [0, 1), got 1");
    adam_row("beta1 < 0", -0.1, 0.999, 1e-8, 0, "betas[0]", "got -0.1");
    adam_row("beta1 NaN", k_nan, 0.999, 1e-8, 0, "betas[0]", "in [0, 1)");
    adam_row("beta2 = 1", 0.9, 1.0, 1e-8, 0, "betas[1]", "in [0, 1), got 1");
    adam_row("beta2 > 1", 0.9, 2.0, 1e-8, 0, "betas[1]", "got 2");
    adam_row("eps = 0", 0.9, 0.999, 0, 0, "eps", "> 0, got 0");
    adam_row("eps < 0", 0.9, 0.999, -1e-8, 0, "eps", "got -1e-08");
    adam_row("eps infinite", 0.9, 0.999, k_inf, 0, "eps", "finite");
    adam_row("weight_decay < 0", 0.9, 0.999, 1e-8, -0.01, "weight_decay", "got -0.01");
    adam_row("weight_decay NaN", 0.9, 0.999, 1e-8, k_nan, "weight_decay", "finite");
  }

  // Methods: set_lr, state, and step with a gradient or value of the wrong shape.
  const std::vector<std::pair<std::string, optim::Optimizer<T>*>> optimizers = {
      {"SGD", &sgd}, {"Adam", &adam}, {"AdamW", &adamw}};
  for (const auto& [name, o] : optimizers) {
    for (double lr : {-0.5, k_nan, k_inf})
      bad(name + "::set_lr(" + std::to_string(lr) + ")", [o = o, lr] { o->set_lr(lr); }, IA,
          {name + "::set_lr", "'lr'", "finite number >= 0"});
    // The second parameter is wrong, the first fine: neither may change.
    rows.push_back({name + "::step: a gradient of the wrong shape",
                    [o = o] { o->step(); },
                    IA,
                    {name + "::step", "parameter 1", "'p2'", "gradient of shape [2]",
                     "expected its value's shape [3]"},
                    [&f] {
                      f.save_p2();
                      f.p2.grad = xt::zeros<T>({2});
                    },
                    [&f] { f.restore_p2(); }});
    rows.push_back({name + "::step: a parameter that changed shape",
                    [o = o] { o->step(); },
                    Expect::logic_error,
                    {name + "::step", "parameter 1", "'p2'", "[4]", "created for shape [3]"},
                    [&f] {
                      f.save_p2();
                      f.p2.value = xt::zeros<T>({4});
                      f.p2.grad = xt::ones<T>({4});
                    },
                    [&f] { f.restore_p2(); }});
  }
  bad("SGD::state: index out of range", [&] { sgd.state(2); }, Expect::out_of_range, {"2"});
  bad("Adam::state: index out of range", [&] { adam.state(5); }, Expect::out_of_range, {"5"});
  bad("AdamW::state: index out of range", [&] { adamw.state(7); }, Expect::out_of_range, {"7"});

  // clip_grad_norm
  const auto clip = [&](std::string label, std::vector<Parameter<T>*> params, double max_norm,
                        double norm_type, std::string arg, std::string expected) {
    bad("clip_grad_norm: " + label,
        [params, max_norm, norm_type] { optim::clip_grad_norm<T>(params, max_norm, norm_type); },
        IA, {"clip_grad_norm", q(arg), expected});
  };
  clip("max_norm < 0", both, -1, 2, "max_norm", ">= 0, got -1");
  clip("max_norm NaN", both, k_nan, 2, "max_norm", "got nan");
  clip("norm_type 0", both, 1, 0, "norm_type", "> 0 (or infinity), got 0");
  clip("norm_type < 0", both, 1, -2, "norm_type", "got -2");
  clip("norm_type NaN", both, 1, k_nan, "norm_type", "got nan");
  clip("a null parameter", {&f.p1, nullptr}, 1, 2, "params", "null pointer at position 1");
  rows.push_back({"clip_grad_norm: a gradient of the wrong shape",
                  [&] { optim::clip_grad_norm<T>(both, 1e-3); },
                  IA,
                  {"clip_grad_norm", "parameter 1", "'p2'", "[5]", "[3]"},
                  [&f] {
                    f.save_p2();
                    f.p2.grad = xt::ones<T>({5});
                  },
                  [&f] { f.restore_p2(); }});

  // Schedules: a bad argument must leave the optimizer's lr alone.
  bad("StepLR: step_size 0", [&] { optim::StepLR<T>(sgd, 0); }, IA,
      {"StepLR", "'step_size'", ">= 1, got 0"});
  bad("StepLR: step_size < 0", [&] { optim::StepLR<T>(sgd, -3); }, IA,
      {"StepLR", "'step_size'", "got -3"});
  for (double gamma : {0.0, -0.5, k_nan, k_inf})
    bad("StepLR: gamma " + std::to_string(gamma), [&, gamma] { optim::StepLR<T>(adam, 2, gamma); },
        IA, {"StepLR", "'gamma'", "finite number > 0"});
  bad("CosineAnnealingLR: T_max 0", [&] { optim::CosineAnnealingLR<T>(sgd, 0); }, IA,
      {"CosineAnnealingLR", "'T_max'", ">= 1, got 0"});
  for (double eta_min : {-1e-3, k_nan, k_inf})
    bad("CosineAnnealingLR: eta_min " + std::to_string(eta_min),
        [&, eta_min] { optim::CosineAnnealingLR<T>(adamw, 10, eta_min); }, IA,
        {"CosineAnnealingLR", "'eta_min'", "finite number >= 0"});
  bad("LinearWarmup: warmup_steps < 0", [&] { optim::LinearWarmup<T>(sgd, -1, 0.1); }, IA,
      {"LinearWarmup", "'warmup_steps'", ">= 0, got -1"});
  for (double start : {-0.1, 1.5, k_nan})
    bad("LinearWarmup: start_factor " + std::to_string(start),
        [&, start] { optim::LinearWarmup<T>(adam, 10, start); }, IA,
        {"LinearWarmup", "'start_factor'", "in [0, 1]"});
  bad("WarmupCosineLR: warmup_steps < 0", [&] { optim::WarmupCosineLR<T>(sgd, -1, 10); }, IA,
      {"WarmupCosineLR", "'warmup_steps'", "got -1"});
  bad("WarmupCosineLR: cosine_steps 0", [&] { optim::WarmupCosineLR<T>(sgd, 5, 0); }, IA,
      {"WarmupCosineLR", "'cosine_steps'", ">= 1, got 0"});
  bad("WarmupCosineLR: start_factor > 1", [&] { optim::WarmupCosineLR<T>(sgd, 5, 10, 2.0); }, IA,
      {"WarmupCosineLR", "'start_factor'", "got 2"});
  bad("WarmupCosineLR: eta_min < 0", [&] { optim::WarmupCosineLR<T>(adam, 5, 10, 0.0, -1.0); }, IA,
      {"WarmupCosineLR", "'eta_min'", "got -1"});

  report("optim", run_rows(rows, snapshot));
}

// ---------------------------------------------------------------- fuzz corpus

TEST_CASE("bad input: every saved fuzz input (seeds and former crashes) replays cleanly") {
  // The harnesses of tests/hardening/fuzz/harness.hpp let only the documented
  // exceptions through; here they run in the ordinary build, sanitized or not.
  using Harness = void (*)(const std::uint8_t*, std::size_t);
  const std::vector<std::pair<std::string, Harness>> targets = {
      {"npy", &fuzz::npy_one}, {"checkpoint", &fuzz::checkpoint_one}, {"tape", &fuzz::tape_one}};
  for (const auto& [name, harness] : targets) {
    const fs::path dir = fs::path(XTGRAD_SOURCE_DIR) / "tests" / "hardening" / "fuzz" / "corpus" / name;
    REQUIRE(fs::is_directory(dir));
    std::size_t inputs = 0;
    for (const auto& entry : fs::directory_iterator(dir)) {
      std::ifstream in(entry.path(), std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
      INFO("input " << entry.path().string());
      CHECK_NOTHROW(harness(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()));
      ++inputs;
    }
    CHECK(inputs > 0);
    MESSAGE("fuzz corpus " << name << ": " << inputs << " inputs replayed");
  }
}

// ---------------------------------------------------------------- untrusted checkpoints

// What test_module.cpp and test_npy.cpp do not cover of issue 6, item 3.
namespace {

fs::path corpus_file(const std::string& name) {
  return fs::path(XTGRAD_SOURCE_DIR) / "tests" / "hardening" / "fuzz" / "corpus" / "npy" / name;
}

std::string text_of(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

template <class T>
std::vector<xt::xarray<T>> values_of(Module<T>& m) {
  std::vector<xt::xarray<T>> out;
  for (Parameter<T>* p : m.parameters()) out.push_back(p->value);
  return out;
}

}  // namespace

TEST_CASE("bad input: a checkpoint from a big-endian machine, in Fortran order, loads converted") {
  // Files as numpy writes them elsewhere: weight '>f8' Fortran-order [[1, 2, 3], [4, 5, 6]],
  // bias '>f8' [1.5, -2] (tests/hardening/fuzz/corpus/npy, written byte by byte).
  TempDir dir("foreign");
  const fs::path ckpt = dir / "ckpt";
  Linear<double> source(3, 2);
  source.save(ckpt);
  fs::copy_file(corpus_file("f8_big_endian_fortran_2x3.npy"), ckpt / "weight.npy",
                fs::copy_options::overwrite_existing);
  fs::copy_file(corpus_file("f8_big_endian.npy"), ckpt / "bias.npy",
                fs::copy_options::overwrite_existing);
  Linear<double> m(3, 2);
  m.load(ckpt);
  CHECK(m.weight.value == xt::xarray<double>{{1, 2, 3}, {4, 5, 6}});
  CHECK(m.bias.value == xt::xarray<double>{1.5, -2});
  // The same bytes into a float32 module are refused, not converted.
  Linear<float> single(3, 2);
  const auto before = values_of(single);
  CHECK_THROWS_WITH_PARTS(single.load(ckpt), std::invalid_argument,
                          {"Module::load", "parameter 'weight'", "stores float64"});
  CHECK(values_of(single) == before);
}

TEST_CASE("bad input: a checkpoint declaring a huge shape is refused before anything is read") {
  TempDir dir("huge");
  const fs::path ckpt = dir / "ckpt";
  Linear<float> m(3, 4);
  m.save(ckpt);
  std::string manifest = text_of(ckpt / "manifest.tsv");
  const std::size_t at = manifest.find("4x3");
  REQUIRE(at != std::string::npos);
  manifest.replace(at, 3, "1000000000x1000000000");
  std::ofstream(ckpt / "manifest.tsv", std::ios::trunc) << manifest;
  const auto before = values_of(m);
  CHECK_THROWS_WITH_PARTS(m.load(ckpt), std::invalid_argument,
                          {"Module::load", "parameter 'weight'", "[1000000000, 1000000000]",
                           "the module expects [4, 3]"});
  CHECK(values_of(m) == before);
}

TEST_CASE("bad input: a checkpoint entry that is not a regular file fails without blocking") {
  TempDir dir("special");
  const fs::path ckpt = dir / "ckpt";
  Linear<float> m(3, 4);
  m.save(ckpt);
  const auto before = values_of(m);
  const fs::path bias = ckpt / "bias.npy";

  SUBCASE("a directory") {
    fs::remove(bias);
    fs::create_directory(bias);
    CHECK_THROWS_WITH_PARTS(m.load(ckpt), std::runtime_error,
                            {"Module::load", "parameter 'bias'", "bias.npy", "Is a directory"});
  }
  SUBCASE("a symbolic link to a character device") {
    fs::remove(bias);
    fs::create_symlink("/dev/zero", bias);
    CHECK_THROWS_WITH_PARTS(m.load(ckpt), std::runtime_error,
                            {"Module::load", "parameter 'bias'", "bias.npy"});
  }
  SUBCASE("a FIFO nobody writes to") {
    // Opening a FIFO for reading blocks until a writer appears: a hostile
    // checkpoint must not be able to hang load(). If it does hang, this
    // test opens the FIFO for writing itself (which releases the reader),
    // then reports the hang.
    fs::remove(bias);
    REQUIRE(::mkfifo(bias.c_str(), 0600) == 0);
    auto outcome = std::async(std::launch::async, [&]() -> std::string {
      try {
        m.load(ckpt);
        return "loaded";
      } catch (const std::exception& e) {
        return std::string(typeid(e) == typeid(std::runtime_error) ? "runtime_error: "
                                                                   : "other: ") +
               e.what();
      }
    });
    const bool hung = outcome.wait_for(std::chrono::seconds(5)) == std::future_status::timeout;
    if (hung) {
      const int fd = ::open(bias.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) ::close(fd);
    }
    CHECK_MESSAGE(!hung, "Module::load blocked opening a FIFO");
    const std::string what = outcome.get();
    INFO(what);
    CHECK(what.rfind("runtime_error: ", 0) == 0);
    CHECK(what.find("bias.npy") != std::string::npos);
  }
  CHECK(values_of(m) == before);
}
