// Second derivatives of the activations, the gated and fused FFN ops,
// softmax, the norms, the losses, dropout, the masks, embedding and rotary
// (their GradRules, by gradgradcheck in double against finite differences of
// the first derivative), and the refusal of the ops that have none.
#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <xtgrad/engine/engine.hpp>

#include "support/activation_reference.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;

namespace {

using Dims = std::vector<std::size_t>;
using Inputs = std::vector<Var<double>>;
using Op = std::function<Var<double>(const Inputs&)>;

// Runs gradgradcheck and fails the test with its report.
void check_second(const Op& f, const std::vector<xt::xarray<double>>& inputs,
                  const GradcheckOptions& options = {}) {
  const GradcheckResult result = gradgradcheck(f, inputs, options);
  INFO(result.report());
  CHECK(result.passed);
}

// f with one more input w, multiplied onto f's output: the first derivative
// then depends on w as it does on the incoming gradient dy, so that
// gradgradcheck also checks each rule's derivative with respect to dy (the
// only second derivative an op linear in its input has).
Op weighted(const Op& f) {
  return [f](const Inputs& in) {
    const Inputs args(in.begin(), in.end() - 1);
    return mul(f(args), in.back());
  };
}

// Values of `dims` in [-range, range], or away from 0 for relu (not at its kink).
xt::xarray<double> inputs_for(Activation a, const std::vector<std::size_t>& dims,
                              std::uint32_t seed, double range = 3.0) {
  return a == Activation::relu ? random_away_from_zero<double>(dims, seed, 0.2, range)
                               : random_array<double>(dims, seed, -range, range);
}

// A create_graph backward from op(x) (any shape, a random dy) must throw
// std::logic_error naming `op_name`, before anything changes.
void check_refused(const std::function<Var<double>(Tape<double>&)>& record,
                   const std::string& op_name) {
  Tape<double> tape;
  const Var<double> y = record(tape);
  const std::size_t before = tape.size();
  CHECK_THROWS_WITH_AS(
      tape.backward(y, random_array<double>(Dims(y.shape().begin(), y.shape().end()), 7),
                    create_graph),
      doctest::Contains(("not twice differentiable: " + op_name).c_str()), std::logic_error);
  CHECK(tape.size() == before);
}

}  // namespace

TEST_CASE("second order ops: activations, on several shapes") {
  for (Activation a : k_all_activations) {
    CAPTURE(to_string(a));
    const Op f = [a](const Inputs& in) { return activation(in[0], a); };
    check_second(f, {inputs_for(a, {7}, 1)});
    check_second(f, {inputs_for(a, {2, 3, 4}, 2)});
    check_second(weighted(f), {inputs_for(a, {3, 5}, 3), random_array({3, 5}, 4)});
  }
}

TEST_CASE("second order ops: relu at 0 has derivative 0 and second derivative 0, as PyTorch") {
  // torch: x = [0, -0, 1.5, -2], y = relu(x) * w, g = dy/dx (create_graph) = w * [x > 0];
  // d<u, g>/dw = u * [x > 0], d<u, g>/dx = 0.
  Tape<double> tape;
  const Var<double> x = tape.leaf(xt::xarray<double>{0.0, -0.0, 1.5, -2.0});
  const Var<double> w = tape.leaf(xt::xarray<double>{2.0, 3.0, 5.0, 7.0});
  tape.backward(mul(relu(x), w), xt::ones<double>({4}), create_graph);
  const Var<double> g = x.grad_var();
  CHECK(g.value() == xt::xarray<double>{0.0, 0.0, 5.0, 0.0});
  tape.zero_grad();
  tape.backward(g, xt::xarray<double>{1.0, 1.0, 1.0, 1.0});
  CHECK(w.grad() == xt::xarray<double>{0.0, 0.0, 1.0, 0.0});
  CHECK(x.grad() == xt::xarray<double>{0.0, 0.0, 0.0, 0.0});
}

TEST_CASE("second order ops: the derivative ops give third derivatives, and stop at the fourth") {
  for (Activation a : k_all_activations) {
    CAPTURE(to_string(a));
    // the create_graph rule of f' records f'', whose own backward (f''') the
    // second pass runs
    check_second([a](const Inputs& in) { return activation_derivative(in[0], a, 1); },
                 {inputs_for(a, {2, 5}, 5)});
    check_second(weighted([a](const Inputs& in) { return activation_derivative(in[0], a, 1); }),
                 {inputs_for(a, {6}, 6), random_array({6}, 7)});

    // d/dx f'' would need f'''' as an op: refused by name
    check_refused(
        [a](Tape<double>& t) { return activation_derivative(t.leaf(inputs_for(a, {3}, 8)), a, 2); },
        std::string(to_string(a)) + "_second_derivative");
  }
}

TEST_CASE("second order ops: gated, with u and g apart and one Var as both") {
  for (Activation a : k_all_activations) {
    CAPTURE(to_string(a));
    check_second([a](const Inputs& in) { return gated(in[0], in[1], a); },
                 {random_array({2, 3, 4}, 9), inputs_for(a, {2, 3, 4}, 10)});
    check_second(weighted([a](const Inputs& in) { return gated(in[0], in[1], a); }),
                 {random_array({5}, 11), inputs_for(a, {5}, 12), random_array({5}, 13)});
    check_second([a](const Inputs& in) { return gated(in[0], in[0], a); },
                 {inputs_for(a, {4}, 14)});
  }
}

TEST_CASE("second order ops: activation_linear and gated_linear, both layouts, bias, dropout") {
  const std::optional<HiddenDropout> no_dropout;
  const std::optional<HiddenDropout> dropped = HiddenDropout{0.3, DropoutKey{5, 1, 0}};
  for (Activation a : {Activation::gelu, Activation::silu, Activation::relu}) {
    for (WeightLayout layout : {WeightLayout::out_in, WeightLayout::in_out}) {
      for (const std::optional<HiddenDropout>& drop : {no_dropout, dropped}) {
        CAPTURE(to_string(a));
        CAPTURE(layout == WeightLayout::out_in);
        CAPTURE(drop.has_value());
        const Dims w_dims = layout == WeightLayout::out_in ? Dims{3, 4} : Dims{4, 3};
        check_second(
            [a, layout, drop](const Inputs& in) {
              return activation_linear(in[0], a, in[1], in[2], layout, drop);
            },
            {inputs_for(a, {2, 2, 4}, 15), random_array(w_dims, 16), random_array({3}, 17)});
        check_second(
            [a, layout, drop](const Inputs& in) {
              return gated_linear(in[0], in[1], a, in[2], std::nullopt, layout, drop);
            },
            {random_array({3, 4}, 18), inputs_for(a, {3, 4}, 19), random_array(w_dims, 20)});
      }
    }
  }
  // one vector [in], with the incoming gradient as an input
  check_second(weighted([](const Inputs& in) {
                 return gated_linear(in[0], in[1], Activation::gelu_tanh, in[2], in[3]);
               }),
               {random_array({4}, 21), random_array({4}, 22), random_array({2, 4}, 23),
                random_array({2}, 24), random_array({2}, 25)});
}

TEST_CASE("second order ops: softmax and log_softmax along each axis") {
  for (std::int64_t dim : {0, 1, -1}) {
    CAPTURE(dim);
    const Op soft = [dim](const Inputs& in) { return softmax(in[0], dim); };
    const Op log_soft = [dim](const Inputs& in) { return log_softmax(in[0], dim); };
    check_second(soft, {random_array({3, 4, 2}, 26, -2.0, 2.0)});
    check_second(log_soft, {random_array({3, 4, 2}, 27, -2.0, 2.0)});
    check_second(weighted(soft), {random_array({2, 5}, 28), random_array({2, 5}, 29)});
    check_second(weighted(log_soft), {random_array({2, 5}, 30), random_array({2, 5}, 31)});
  }
}

TEST_CASE("second order ops: layer_norm and rms_norm, with and without weight and bias") {
  for (const Dims& dims : {Dims{5}, Dims{3, 4}, Dims{2, 2, 3}}) {
    CAPTURE(dims.size());
    const Dims d{dims.back()};
    const xt::xarray<double> x = random_array(dims, 32, -2.0, 2.0);
    check_second([](const Inputs& in) { return layer_norm(in[0], in[1], in[2]); },
                 {x, random_array(d, 33), random_array(d, 34)});
    check_second([](const Inputs& in) { return layer_norm(in[0]); }, {x});
    check_second([](const Inputs& in) { return layer_norm(in[0], in[1], std::nullopt, 0.1); },
                 {x, random_array(d, 35)});
    check_second([](const Inputs& in) { return rms_norm(in[0], in[1]); }, {x, random_array(d, 36)});
    check_second([](const Inputs& in) { return rms_norm(in[0], std::nullopt, 1e-3); }, {x});
    check_second(weighted([](const Inputs& in) { return layer_norm(in[0], in[1], in[2]); }),
                 {x, random_array(d, 37), random_array(d, 38), random_array(dims, 39)});
  }
}

TEST_CASE("second order ops: mse in both arguments, and of one Var with itself") {
  check_second([](const Inputs& in) { return mse(in[0], in[1]); },
               {random_array({3, 4}, 40), random_array({3, 4}, 41)});
  check_second(weighted([](const Inputs& in) { return mse(in[0], in[1]); }),
               {random_array({5}, 42), random_array({5}, 43), random_array({}, 44)});
  check_second([](const Inputs& in) { return mse(in[0], in[0]); }, {random_array({4}, 45)});
}

TEST_CASE("second order ops: cross_entropy with class targets, every reduction and option") {
  const Indices targets = {2, 0, 3, 1};
  const Indices some_ignored = {2, -100, 3, -100};
  const Indices all_ignored = {7, 7, 7, 7};
  for (Reduction r : {Reduction::none, Reduction::mean, Reduction::sum}) {
    for (double smoothing : {0.0, 0.2}) {
      CAPTURE(static_cast<int>(r));
      CAPTURE(smoothing);
      for (const auto& [target, ignore] :
           {std::pair{targets, std::int64_t(-100)}, std::pair{some_ignored, std::int64_t(-100)},
            std::pair{all_ignored, std::int64_t(7)}}) {
        const CrossEntropyOptions options{ignore, smoothing, r};
        const Op f = [target = target, options](const Inputs& in) {
          return cross_entropy(in[0], target, options);
        };
        const Dims y_dims = r == Reduction::none ? Dims{4} : Dims{};
        check_second(f, {random_array({4, 5}, 46, -2.0, 2.0)});
        // (every row ignored, mean is NaN: a weight on it has a NaN gradient)
        if (ignore == -100 || r != Reduction::mean)
          check_second(weighted(f),
                       {random_array({4, 5}, 47, -2.0, 2.0), random_array(y_dims, 48)});
      }
      // one row [C] with a 0-d target
      const CrossEntropyOptions options{-100, smoothing, r};
      check_second(
          [options](const Inputs& in) { return cross_entropy(in[0], Indices(3), options); },
          {random_array({6}, 49, -2.0, 2.0)});
    }
  }
}

TEST_CASE("second order ops: ignored rows get no first or second derivative") {
  Tape<double> tape;
  const Var<double> x = tape.leaf(random_array({3, 4}, 50));
  tape.backward(cross_entropy(x, Indices{1, -100, 2}, {-100, 0.1, Reduction::mean}), create_graph);
  const Var<double> g = x.grad_var();
  tape.zero_grad();
  tape.backward(g, random_array({3, 4}, 51));
  for (std::size_t j = 0; j < 4; ++j) {
    CHECK(g.value()(1, j) == 0.0);
    CHECK(x.grad()(1, j) == 0.0);
  }
}

TEST_CASE("second order ops: cross_entropy with probability targets, both arguments") {
  for (Reduction r : {Reduction::none, Reduction::mean, Reduction::sum}) {
    for (double smoothing : {0.0, 0.3}) {
      CAPTURE(static_cast<int>(r));
      CAPTURE(smoothing);
      const CrossEntropyOptions options{-100, smoothing, r};
      check_second([options](const Inputs& in) { return cross_entropy(in[0], in[1], options); },
                   {random_array({3, 4}, 52, -2.0, 2.0), random_array({3, 4}, 53, 0.0, 1.0)});
      check_second(
          weighted([options](const Inputs& in) { return cross_entropy(in[0], in[1], options); }),
          {random_array({4}, 54, -2.0, 2.0), random_array({4}, 55, 0.0, 1.0),
           random_array({}, 56)});
    }
  }
}

TEST_CASE("second order ops: nll_loss, every reduction, ignore_index, one row") {
  for (Reduction r : {Reduction::none, Reduction::mean, Reduction::sum}) {
    CAPTURE(static_cast<int>(r));
    const NllLossOptions options{1, r};
    const Op f = [options](const Inputs& in) {
      return nll_loss(log_softmax(in[0], -1), Indices{0, 1, 2}, options);
    };
    check_second(f, {random_array({3, 4}, 57)});
    check_second(weighted(f), {random_array({3, 4}, 58),
                               random_array(r == Reduction::none ? Dims{3} : Dims{}, 59)});
    check_second(
        weighted([options](const Inputs& in) { return nll_loss(in[0], Indices(2), options); }),
        {random_array({4}, 60), random_array({}, 61)});
  }
}

TEST_CASE("second order ops: dropout keeps its mask in the gradient's gradient") {
  const DropoutKey key{11, 3, 0};
  for (double p : {0.0, 0.4, 1.0}) {
    CAPTURE(p);
    check_second(weighted([p, key](const Inputs& in) { return dropout(in[0], p, true, key); }),
                 {random_array({4, 6}, 62), random_array({4, 6}, 63)});
  }
  // the gradient of dropout(x) * x is m / (1 - p) (x + x): the same mask twice
  Tape<double> tape;
  const xt::xarray<double> xv = random_away_from_zero<double>({50}, 64);
  const Var<double> x = tape.leaf(xv);
  const Var<double> kept = dropout(x, 0.5, true, key);
  tape.backward(mul(kept, x), xt::ones<double>({50}), create_graph);
  const Var<double> g = x.grad_var();
  std::size_t dropped = 0;
  for (std::size_t i = 0; i < 50; ++i) {
    const double m = kept.value()(i) == 0.0 ? 0.0 : 2.0;  // m / (1 - p)
    dropped += m == 0.0 ? 1 : 0;
    CHECK(g.value()(i) == doctest::Approx(m * xv(i) + kept.value()(i)));
  }
  CHECK(dropped > 10);
  CHECK(dropped < 40);
}

TEST_CASE("second order ops: masked_fill, where, triu and tril") {
  xt::xarray<bool> row_mask = xt::xarray<bool>::from_shape({3, 1});  // masked rows, broadcast
  row_mask(0, 0) = true;
  row_mask(1, 0) = false;
  row_mask(2, 0) = true;
  const xt::xarray<bool> mask = {

      {true, false, false, true}, {false, false, true, false}, {true, true, false, false}};
  for (const xt::xarray<bool>& m : {row_mask, mask}) {
    check_second(weighted([m](const Inputs& in) { return masked_fill(in[0], m, -2.5); }),

                 {random_array({3, 4}, 65), random_array({3, 4}, 66)});
    check_second([m](const Inputs& in) { return masked_fill(mul(in[0], in[0]), m, 0.5); },
                 {random_array({3, 4}, 67)});
  }
  // a [4] and b [3, 1] broadcast with cond [3, 4]
  check_second(weighted([mask](const Inputs& in) { return xtgrad::where(mask, in[0], in[1]); }),
               {random_array({4}, 68), random_array({3, 1}, 69), random_array({3, 4}, 70)});
  check_second([mask](const Inputs& in) { return xtgrad::where(mask, mul(in[0], in[0]), in[0]); },
               {random_array({3, 4}, 71)});
  for (std::int64_t diagonal : {-1, 0, 2}) {
    CAPTURE(diagonal);
    check_second(weighted([diagonal](const Inputs& in) { return triu(in[0], diagonal); }),
                 {random_array({2, 3, 4}, 72), random_array({2, 3, 4}, 73)});
    check_second(weighted([diagonal](const Inputs& in) { return tril(in[0], diagonal); }),
                 {random_array({3, 3}, 74), random_array({3, 3}, 75)});
  }
}

TEST_CASE("second order ops: embedding and its scatter-add, with and without padding") {
  const Indices idx = {{2, 0, 2}, {3, 2, 0}};
  for (std::optional<std::int64_t> padding : {std::optional<std::int64_t>{}, {std::int64_t(0)}}) {
    CAPTURE(padding.has_value());
    // (With padding_idx, the weight's gradient v * embedding(W) depends on the
    // padding row, whose gradient is 0 by convention: finite differences see
    // that dependence, the convention does not, as in torch. Not checked.)
    if (!padding)
      check_second(
          weighted([idx, padding](const Inputs& in) { return embedding(idx, in[0], padding); }),
          {random_array({4, 3}, 76), random_array({2, 3, 3}, 77)});

    check_second(weighted([idx, padding](const Inputs& in) {
                   return embedding_dense_backward(in[0], idx, 4, padding);
                 }),
                 {random_array({2, 3, 3}, 78), random_array({4, 3}, 79)});
    // the table's gradient of a quadratic in the looked-up rows
    check_second(
        [idx, padding](const Inputs& in) {
          const Var<double> rows = embedding(idx, in[0], padding);
          return mul(rows, rows);
        },
        {random_array({4, 3}, 80)});
  }
}

TEST_CASE("second order ops: apply_rotary, with a position offset") {
  for (std::size_t offset : {std::size_t(0), std::size_t(5)}) {
    CAPTURE(offset);
    check_second(
        weighted([offset](const Inputs& in) { return apply_rotary(in[0], offset, 100.0); }),
        {random_array({2, 3, 4}, 81), random_array({2, 3, 4}, 82)});
    check_second(
        [offset](const Inputs& in) {
          const Var<double> r = apply_rotary(in[0], offset);
          return mul(r, r);
        },
        {random_array({3, 6}, 83)});
  }
}

TEST_CASE(
    "second order ops: index_select, index_add, gather and scatter_add, each the other's rule") {
  const Indices rows = {2, 0, 2};                           // repeated
  const Indices cells = {{1, 0, 1}, {0, 3, 3}, {3, 2, 3}};  // repeated along dim 1
  // Linear ops: weighted() makes the first derivative depend on the weight as
  // on dy, and the squares make it depend on the input itself.
  check_second(weighted([rows](const Inputs& in) { return index_select(in[0], 1, rows); }),
               {random_array({3, 4}, 87), random_array({3, 3}, 88)});
  check_second(weighted([cells](const Inputs& in) { return gather(in[0], 1, cells); }),
               {random_array({3, 4}, 89), random_array({3, 3}, 90)});
  check_second(weighted([rows](const Inputs& in) { return index_add(in[0], 1, rows, in[1]); }),
               {random_array({3, 4}, 91), random_array({3, 3}, 92), random_array({3, 4}, 93)});
  check_second(weighted([cells](const Inputs& in) { return scatter_add(in[0], 1, cells, in[1]); }),
               {random_array({3, 4}, 94), random_array({3, 3}, 95), random_array({3, 4}, 96)});
  check_second(
      [rows, cells](const Inputs& in) {
        const Var<double> a = index_select(in[0], 1, rows), b = gather(in[0], 1, cells);
        return add(mul(a, a), mul(b, index_add(b, 1, rows, a)));
      },
      {random_array({3, 4}, 97)});
}

TEST_CASE("second order ops: the other ops without a rule refuse by name") {
  const auto x_of = [](Tape<double>& t) { return t.leaf(random_array({3, 4}, 86)); };
  check_refused([&](Tape<double>& t) { return max(x_of(t), 1).values; }, "max");
  check_refused([&](Tape<double>& t) { return slice(x_of(t), 1, 0, 4, 2); }, "slice");
}

TEST_CASE("second order ops: float follows double within float rounding") {
  // d/dx <u, d/dx <v, f(x)>> for a chain of the ops above, in both types
  const auto run = [](auto zero) {
    using T = decltype(zero);
    Tape<T> tape;
    const Var<T> x = tape.leaf(random_array<T>({3, 4}, 87));
    const Var<T> w = tape.leaf(random_array<T>({4, 4}, 88));
    const Var<T> h =
        layer_norm(gated_linear(x, x, Activation::gelu, w), std::nullopt, std::nullopt, 1e-5);
    const Var<T> loss = cross_entropy(softmax(h, -1), Indices{0, 3, 1}, {-100, 0.1});
    const Var<T> g = grad(tape, {loss}, {x}, GradOptions<T>{{}, true})[0];
    return xt::xarray<double>(xt::cast<double>(
        grad(tape, {g}, {x}, GradOptions<T>{{random_array<T>({3, 4}, 89)}})[0].value()));
  };
  const xt::xarray<double> reference = run(0.0);
  CHECK(xt::amax(xt::abs(reference))() > 1e-2);  // a second derivative that is not 0
  check_close(run(0.0f), reference, 2e-3, 2e-4);
}
