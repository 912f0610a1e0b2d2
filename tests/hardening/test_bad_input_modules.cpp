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
