// The bad-input table of the modules and the functional API: the functional
// feed-forward forms, module constructors and module forwards (save and load
// are in test_bad_input_io.cpp; the machinery is in tests/support/bad_input.hpp).

#include <doctest/doctest.h>

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <xtensor/xtensor.hpp>
#include <xtgrad/engine/engine.hpp>
#include <xtgrad/modules/modules.hpp>

#include "support/bad_input.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;

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
  const auto snapshot = snapshot_of<T>({&tape, &other}, leaves);
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

TEST_CASE_TEMPLATE("bad input: module constructors and forwards", T, float, double) {
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

  auto snapshot = [&] {
    State s;
    for (Module<T>* m : std::vector<Module<T>*>{&lin, &ff, &pw, &gf})
      for (Parameter<T>* p : m->parameters()) s.add(*p);
    for (const Var<T>& v : {x3, x4, x5, x0}) s.add(v);
    return s;
  };
  std::vector<Row> rows;
  const auto IA = Expect::invalid_argument;
  const auto LE = Expect::logic_error;
  const auto bad = row_adder(rows);

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

  report("modules", run_rows(rows, snapshot));
}
