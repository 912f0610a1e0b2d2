// The bad-input table of the modules and the functional API: the functional
// feed-forward forms, module constructors and module forwards (save and load
// are in test_bad_input_io.cpp; the machinery is in tests/support/bad_input.hpp).

#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <xtensor/xtensor.hpp>
#include <xtgrad/data/data.hpp>
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

// ---------------------------------------------------------------- the model modules

TEST_CASE_TEMPLATE("bad input: norms, Dropout, Embedding, Sequential, Mlp, PreNormResidual", T,
                   float, double) {
  LayerNorm<T> ln(4);
  RMSNorm<T> rms(4);
  Dropout<T> drop(0.5, 1);
  Embedding<T> emb(6, 3, 0);
  ActivationLayer<T> act(Activation::relu);
  Sequential<T> seq;
  seq.template emplace_back<Linear<T>>(4, 2);
  MlpOptions mo;
  mo.dropout = 0.5;
  Mlp<T> mlp(4, {5}, 2, mo);
  PreNormResidualOptions po;
  po.dropout = 0.5;
  po.ffn_dropout = 0.5;
  PreNormResidual<T> block(4, 8, po);
  Tape<T> tape, cleared;
  const Var<T> stale = cleared.leaf(xt::xarray<T>{1});
  cleared.clear();
  Var<T> x4 = tape.leaf(random_array<T>({2, 4}, 1));
  Var<T> x5 = tape.leaf(random_array<T>({2, 5}, 2));
  Var<T> x0 = tape.leaf(xt::xarray<T>(T(1)));
  tape.backward(sum(ln(x4)) + sum(rms(x4)) + sum(mlp(x4)) + sum(block(x4)) + sum(seq(x4)) +
                sum(emb(tape, Indices{1, 2})));  // gradients everywhere

  const std::vector<Module<T>*> modules = {&ln, &rms, &drop, &emb, &act, &seq, &mlp, &block};
  auto snapshot = [&] {
    State s;
    s.add(tape.size());
    for (Module<T>* m : modules) {
      for (Parameter<T>* p : m->parameters()) s.add(*p);
      for (const auto& entry : m->named_modules())  // the dropout steps
        if (auto* d = dynamic_cast<Dropout<T>*>(entry.second)) s.add(std::size_t(d->step()));
    }
    for (const Var<T>& v : {x4, x5, x0}) s.add(v);
    return s;
  };
  std::vector<Row> rows;
  const auto IA = Expect::invalid_argument;
  const auto LE = Expect::logic_error;
  const auto OR = Expect::out_of_range;
  const auto bad = row_adder(rows);
  const double nan = k_nan, inf = k_inf;
  Generator generator(1);
  const auto bad_activation = static_cast<Activation>(9);

  // Constructors: every option out of its range, one at a time.
  bad("LayerNorm(0)", [] { LayerNorm<T>(0); }, IA, {"LayerNorm", "'normalized_shape'", "positive"});
  for (const double eps : {-1e-5, nan, inf})
    bad("LayerNorm(4, " + std::to_string(eps) + ")", [eps] { LayerNorm<T>(4, eps); }, IA,
        {"LayerNorm", "'eps'", "finite eps >= 0"});
  bad("RMSNorm(0)", [] { RMSNorm<T>(0); }, IA, {"RMSNorm", "'normalized_shape'", "positive"});
  for (const double eps : {-1e-6, nan, inf})
    bad("RMSNorm(4, " + std::to_string(eps) + ")", [eps] { RMSNorm<T>(4, eps); }, IA,
        {"RMSNorm", "'eps'", "finite eps >= 0"});
  for (const double p : {-0.1, 1.5, nan}) {
    const std::string ps = std::to_string(p);
    bad("Dropout(" + ps + ")", [p] { Dropout<T>{p}; }, IA, {"Dropout", "'p'", "[0, 1]"});
    bad("Dropout(" + ps + ", generator)", [p, &generator] { Dropout<T>(p, generator); }, IA,
        {"Dropout", "'p'", "[0, 1]"});
    bad("FeedForward(4, 8, gelu, " + ps + ", generator)",
        [p, &generator] { FeedForward<T>(4, 8, Activation::gelu, p, generator); }, IA,
        {"FeedForward", "'dropout'", "[0, 1]"});
    bad("PositionwiseFFN(4, 8, " + ps + ", generator)",
        [p, &generator] { PositionwiseFFN<T>(4, 8, p, generator); }, IA,
        {"PositionwiseFFN", "'dropout'", "[0, 1]"});
    bad("GatedFFN(4, 6, 3, silu, {}, " + ps + ", generator)",
        [p, &generator] { GatedFFN<T>(4, 6, 3, Activation::silu, {}, p, generator); }, IA,
        {"GatedFFN", "'dropout'", "[0, 1]"});
    bad("Mlp: dropout " + ps,
        [p] {
          MlpOptions o;
          o.dropout = p;
          Mlp<T>(3, {4}, 2, o);
        },
        IA, {"Mlp", "'dropout'", "[0, 1]"});
    bad("PreNormResidual: dropout " + ps,
        [p] {
          PreNormResidualOptions o;
          o.dropout = p;
          PreNormResidual<T>(4, 8, o);
        },
        IA, {"PreNormResidual", "'dropout'", "[0, 1]"});
    bad("PreNormResidual: ffn_dropout " + ps,
        [p] {
          PreNormResidualOptions o;
          o.ffn_dropout = p;
          PreNormResidual<T>(4, 8, o);
        },
        IA, {"PreNormResidual", "'ffn_dropout'", "[0, 1]"});
  }
  bad("Embedding(0, 3)", [] { Embedding<T>(0, 3); }, IA,
      {"Embedding", "'num_embeddings'", "positive"});
  bad("Embedding(6, 0)", [] { Embedding<T>(6, 0); }, IA,
      {"Embedding", "'embedding_dim'", "positive"});
  bad("Embedding(6, 3, 6)", [] { Embedding<T>(6, 3, 6); }, IA,
      {"Embedding", "'padding_idx'", "6", "[-6, 6)"});
  bad("Embedding(6, 3, -7, generator)", [&] { Embedding<T>(6, 3, -7, generator); }, IA,
      {"Embedding", "'padding_idx'", "-7", "[-6, 6)"});
  bad("ActivationLayer(Activation(9))", [=] { ActivationLayer<T>{bad_activation}; }, IA,
      {"ActivationLayer", "'activation'", "Activation(9)"});
  bad("Mlp(0, {4}, 2)", [] { Mlp<T>(0, {4}, 2); }, IA, {"Mlp", "'in_features'", "positive"});
  bad("Mlp(3, {4, 0}, 2)",
      [] {
        Mlp<T>(3, {4, 0}, 2);
      },
      IA, {"Mlp", "'hidden_features[1]'", "positive"});
  bad("Mlp(3, {}, 0)", [] { Mlp<T>(3, {}, 0); }, IA, {"Mlp", "'out_features'", "positive"});
  bad("Mlp: Activation(9)",
      [=, &generator] {
        MlpOptions o;
        o.activation = bad_activation;
        Mlp<T>(3, {4}, 2, o, generator);
      },
      IA, {"Mlp", "'activation'", "Activation(9)"});
  bad("PreNormResidual(0, 8)", [] { PreNormResidual<T>(0, 8); }, IA,
      {"PreNormResidual", "'d_model'", "positive"});
  bad("PreNormResidual(4, 0)", [] { PreNormResidual<T>(4, 0); }, IA,
      {"PreNormResidual", "'d_ff'", "positive"});
  const auto block_row = [&](std::string label, std::function<void(PreNormResidualOptions&)> set,
                             std::vector<std::string> parts) {
    bad(
        "PreNormResidual: " + label,
        [set] {
          PreNormResidualOptions o;
          set(o);
          PreNormResidual<T>(4, 8, o);
        },
        IA, std::move(parts));
  };
  for (const double eps : {-1.0, nan, inf})
    block_row("eps " + std::to_string(eps), [eps](auto& o) { o.eps = eps; },
              {"PreNormResidual", "'eps'", "finite eps >= 0"});
  block_row("NormKind(7)", [](auto& o) { o.norm = static_cast<NormKind>(7); },
            {"PreNormResidual", "'norm'", "NormKind(7)"});
  block_row("FFNKind(7)", [](auto& o) { o.ffn = static_cast<FFNKind>(7); },
            {"PreNormResidual", "'ffn'", "FFNKind(7)"});
  block_row("Activation(9)", [=](auto& o) { o.activation = bad_activation; },
            {"PreNormResidual", "'activation'", "Activation(9)"});
  block_row("positionwise with gelu",
            [](auto& o) {
              o.ffn = FFNKind::positionwise;
              o.activation = Activation::gelu;
            },
            {"PreNormResidual", "'activation'", "gelu", "relu"});
  bad("Sequential::push_back(nullptr)", [&] { seq.push_back(std::unique_ptr<Module<T>>()); }, IA,
      {"Sequential::push_back", "'module'", "null"});
  bad("Sequential::at(1)", [&] { seq.at(1); }, OR, {"Sequential::at", "1", "1 modules"});
  bad("Mlp::layer(2)", [&] { mlp.layer(2); }, IA,
      {"xtgrad::Mlp::layer: argument 'i' is 2, expected less than 2 (the number of Linear "
       "layers)"});
  bad("Mlp::dropout(1)", [&] { mlp.dropout(1); }, IA,
      {"xtgrad::Mlp::dropout: argument 'i' is 1, expected less than 1"});

  // Forwards: a misfit x, a 0-d x, bad handles; bad indices.
  bad("LayerNorm: x of the wrong width", [&] { ln(x5); }, IA,
      {"layer_norm", "'x'", "[2, 5]", "expected [..., 4]"});
  bad("LayerNorm: 0-d x", [&] { ln(x0); }, IA, {"layer_norm", "'x'", "[]"});
  bad("RMSNorm: x of the wrong width", [&] { rms(x5); }, IA,
      {"rms_norm", "'x'", "[2, 5]", "expected [..., 4]"});
  bad("RMSNorm: 0-d x", [&] { rms(x0); }, IA, {"rms_norm", "'x'", "[]"});
  bad("Mlp: x of the wrong width", [&] { mlp(x5); }, IA,
      {"Mlp", "'x'", "[2, 5]", "expected [..., 4]"});
  bad("Mlp: 0-d x", [&] { mlp(x0); }, IA, {"Mlp", "'x'", "[]"});
  bad("PreNormResidual: x of the wrong width", [&] { block(x5); }, IA,
      {"PreNormResidual", "'x'", "[2, 5]", "expected [..., 4]"});
  bad("PreNormResidual: 0-d x", [&] { block(x0); }, IA, {"PreNormResidual", "'x'", "[]"});
  bad("Sequential: x of the wrong width", [&] { seq(x5); }, IA, {"linear", "'x'", "[2, 5]"});
  bad("Embedding: index 6 of 6",
      [&] {
        emb(tape, Indices{1, 6});
      },
      IA, {"embedding", "'indices'", "6", "flat position 1", "[0, 6)"});
  bad("Embedding: index -1", [&] { emb(tape, Indices{-1}); }, IA,
      {"embedding", "'indices'", "-1", "[0, 6)"});
  bad("Embedding::infer: index 9", [&] { emb.infer(Indices{9}); }, IA,
      {"embedding", "'indices'", "9"});
  bad("Embedding: forward(x)", [&] { emb(x4); }, LE, {"Module::forward"});
  const std::vector<std::pair<std::string, Module<T>*>> named = {
      {"LayerNorm", &ln},         {"RMSNorm", &rms},    {"Dropout", &drop},
      {"ActivationLayer", &act},  {"Sequential", &seq}, {"Mlp", &mlp},
      {"PreNormResidual", &block}};
  for (const auto& [name, m] : named) {
    Module<T>* module = m;
    bad(name + ": empty x", [module] { (*module)(Var<T>()); }, LE,
        {name, "'x'", "empty Var handle"});
    bad(name + ": x of a cleared tape", [module, stale] { (*module)(stale); }, LE,
        {name, "'x'", "cleared"});
  }

  report("model modules", run_rows(rows, snapshot));
}

// ---------------------------------------------------------------- sizes

// Constructor sizes whose products wrap around std::size_t or whose
// parameters exceed the machine's memory, and the sums of positions of
// generate and KvCache: std::invalid_argument naming the module, the
// arguments and the count (engine/checked_size.hpp), with nothing changed.
TEST_CASE_TEMPLATE("bad input: module sizes that overflow or exceed memory", T, float, double) {
  constexpr std::size_t k_2_32 = std::size_t{1} << 32, k_2_40 = std::size_t{1} << 40;
  constexpr std::size_t k_2_62 = std::size_t{1} << 62, k_max = SIZE_MAX;
  const auto config = [](GPTStyle style, std::size_t vocab, std::size_t block, std::size_t layers,
                         std::size_t embd) {
    GPTConfig c;
    c.style = style;
    c.vocab_size = vocab;
    c.block_size = block;
    c.n_layer = layers;
    c.n_head = 1;
    c.n_embd = embd;
    return c;
  };
  // A llama-style GPT has no position table: a block_size of 2^62 builds,
  // and its cache is what must refuse.
  const GPT<T> long_context(config(GPTStyle::llama, 5, k_2_62, 1, 2));
  KvCache<T> cache(1, 1, 1, 2, 4);
  cache.append(0, xt::zeros<T>({1, 1, 1, 2}), xt::zeros<T>({1, 1, 1, 2}));  // length 1
  const auto snapshot = [&] {
    State s;
    for (Parameter<T>* p : const_cast<GPT<T>&>(long_context).parameters()) s.add(*p);
    s.add(cache.length(0));
    s.add(cache.keys(0));
    return s;
  };
  std::vector<Row> rows;
  const auto IA = Expect::invalid_argument;
  const auto bad = row_adder(rows);
  const std::string overflows = "overflows std::size_t (at most 18446744073709551615)";
  const std::string too_many = "overflows std::ptrdiff_t (at most 9223372036854775807)";
  const std::string more = "bytes, more than the";

  bad("GPT: block_size * n_embd = 2^64 (wpe)",
      [&] { GPT<T>(config(GPTStyle::gpt2, 5, std::size_t{1} << 63, 1, 2)); }, IA,
      {"xtgrad::GPT: arguments 'vocab_size', 'block_size', 'n_layer', 'n_embd' and 'ffn_hidden': "
       "parameters of ",
       more});
  bad("GPT: terabytes of embeddings", [&] { GPT<T>(config(GPTStyle::gpt2, k_2_40, 4, 1, 4)); }, IA,
      {"GPT", "'vocab_size'", "parameters of 4398046511372 elements", more});
  bad("GPT: 2^40 layers", [&] { GPT<T>(config(GPTStyle::llama, 5, 4, k_2_40, 2)); }, IA,
      {"GPT", "'n_layer'", "parameters of", more});
  bad("GPT: the default ffn_hidden 4 * 2^62",
      [&] { GPT<T>(config(GPTStyle::gpt2, 5, 4, 1, k_2_62)); }, IA,
      {"xtgrad::GPT: argument 'n_embd' (the default ffn_hidden): 4 * 4611686018427387904 = "
       "18446744073709551616",
       overflows});
  bad("GPT::make_cache: capacity 2^62", [&] { long_context.make_cache(); }, IA,
      {"xtgrad::KvCache: arguments 'batch', 'n_layers', 'n_kv_heads', 'head_dim' and 'capacity': "
       "keys and values of 18446744073709551616 elements",
       more});
  bad("GPT::make_cache: batch SIZE_MAX", [&] { long_context.make_cache(k_max); }, IA,
      {"KvCache", "'batch'", "keys and values", more});
  bad("GPT::generate: max_new_tokens SIZE_MAX",
      [&] {
        long_context.generate({1, 2}, k_max);
      },
      IA,
      {"xtgrad::GPT::generate: the prompt's length and argument 'max_new_tokens': 2 + "
       "18446744073709551615 = 18446744073709551617",
       overflows});
  bad("KvCache: 2^64 positions of keys", [] { KvCache<T>(1, 1, 1, k_2_32, k_2_32); }, IA,
      {"KvCache", "'capacity'", "keys and values of 36893488147419103232 elements", more});
  bad("KvCache: terabytes", [] { KvCache<T>(2, 24, 16, 128, k_2_32); }, IA,
      {"KvCache", "keys and values", more});
  bad("KvCache::check_append: length 1 + SIZE_MAX",
      [&] { cache.check_append("KvCache::append", 0, k_max); }, IA,
      {"xtgrad::KvCache::append: the cached positions and argument 'new_positions': 1 + "
       "18446744073709551615",
       overflows});
  bad("MultiheadAttention: embed_dim 2^32", [] { MultiheadAttention<T>(k_2_32, 1); }, IA,
      {"xtgrad::MultiheadAttention: argument 'embed_dim': parameters of "
       "73786976312018075648 elements",
       more});
  bad("MultiheadAttention: embed_dim 2^40, no bias",
      [] {
        MultiheadAttention<T>(k_2_40, 1, MultiheadAttentionOptions{false, 0.0});
      },
      IA, {"MultiheadAttention", "'embed_dim'", more});
  CausalSelfAttentionOptions one_head;
  bad("CausalSelfAttention: n_embd 2^32", [&] { CausalSelfAttention<T>(k_2_32, one_head); }, IA,
      {"xtgrad::CausalSelfAttention: arguments 'n_embd', 'n_heads' and 'n_kv_heads': parameters",
       more});
  CausalSelfAttentionOptions llama;
  llama.layout = AttentionLayout::llama;
  llama.n_heads = 2;
  bad("CausalSelfAttention llama: n_embd 2^40", [&] { CausalSelfAttention<T>(k_2_40, llama); }, IA,
      {"CausalSelfAttention", "'n_embd'", more});
  TransformerBlockOptions block;
  bad("TransformerBlock: n_embd 2^32", [&] { TransformerBlock<T>(k_2_32, block); }, IA,
      {"xtgrad::TransformerBlock: arguments 'n_embd', 'n_heads', 'n_kv_heads' and 'ffn_hidden': "
       "parameters",
       more});
  bad("TransformerBlock: the default ffn_hidden 4 * 2^62",
      [&] { TransformerBlock<T>(k_2_62, block); }, IA,
      {"TransformerBlock", "'n_embd' (the default ffn_hidden)", overflows});
  TransformerBlockOptions wide_ffn;
  wide_ffn.ffn_hidden = k_2_40;
  bad("TransformerBlock: ffn_hidden 2^40", [&] { TransformerBlock<T>(4, wide_ffn); }, IA,
      {"TransformerBlock", "'ffn_hidden'", more});
  bad("default_ffn_hidden: llama 8 * 2^62", [] { default_ffn_hidden(GPTStyle::llama, k_2_62); }, IA,
      {"xtgrad::default_ffn_hidden: argument 'n_embd'", overflows});
  bad("Linear: 2^32 x 2^32", [] { Linear<T>(k_2_32, k_2_32); }, IA,
      {"xtgrad::Linear: arguments 'in_features' and 'out_features': the shape [4294967296, "
       "4294967296] of 18446744073709551616 elements",
       too_many});
  bad("Linear: terabytes", [] { Linear<T>(k_2_40, 4); }, IA,
      {"Linear", "[4, 1099511627776]", more});
  bad("Embedding: 2^40 x 2^20", [] { Embedding<T>(k_2_40, std::size_t{1} << 20); }, IA,
      {"Embedding", "'num_embeddings' and 'embedding_dim'", more});
  bad("LayerNorm: 2^62", [] { LayerNorm<T>{k_2_62}; }, IA,
      {"LayerNorm", "'normalized_shape'", more});
  bad("RMSNorm: 2^62", [] { RMSNorm<T>{k_2_62}; }, IA, {"RMSNorm", "'normalized_shape'", more});
  bad("GatedFFN: 2^32 x 2^32", [] { GatedFFN<T>(k_2_32, k_2_32, 1); }, IA,
      {"GatedFFN", "'d_in' and 'd_hidden'", too_many});
  bad("GatedFFN: d_out 2^40", [] { GatedFFN<T>(4, 4, k_2_40); }, IA,
      {"GatedFFN", "'d_hidden' and 'd_out'", more});
  bad("Conv1D: 2^32 x 2^32", [] { Conv1D<T>(k_2_32, k_2_32); }, IA,
      {"Conv1D", "'nf' and 'nx'", too_many});
  bad("DistributedSampler: n SIZE_MAX", [] { distributed::DistributedSampler(k_max, {2}, 0, 2); },
      IA, {"distributed::DistributedSampler", "'n' and 'ranks'", overflows});
  bad("DistributedSampler: n 2^40", [] { distributed::DistributedSampler(k_2_40, {}, 0, 1); }, IA,
      {"distributed::DistributedSampler", "argument 'n'", more});

  report("module sizes", run_rows(rows, snapshot));
}
