#include "functional.hpp"

#include <algorithm>
#include <initializer_list>
#include <string>
#include <vector>

#include "../engine/check.hpp"
#include "../engine/ops/fused_linear.hpp"
#include "../engine/ops/linear.hpp"

namespace xtgrad {

namespace {

// Throws unless v's shape is exactly `expected`; the message, with `why()`
// saying where `expected` comes from, is built only then (these checks run
// at every step of a training loop).
template <class T, class Why>
void expect_shape(const char* function, const char* arg, const Var<T>& v,
                  std::initializer_list<std::size_t> expected, const Why& why) {
  const Shape& shape = v.shape();
  if (!std::equal(shape.begin(), shape.end(), expected.begin(), expected.end()))
    detail::fail_shape(function, arg, shape,
                       detail::shape_str(std::vector<std::size_t>(expected)) + " (" + why() + ")");
}

// The two-layer blocks: x [..., D], w1 [H, D], b1 [H], w2 [D, H], b2 [D].
template <class T>
void check_two_layer(const char* function, const char* const names[5], const Var<T>& x,
                     const Var<T>& w1, const Var<T>& b1, const Var<T>& w2, const Var<T>& b2) {
  detail::common_tape<T>(
      function,
      {{names[0], &x}, {names[1], &w1}, {names[2], &b1}, {names[3], &w2}, {names[4], &b2}});
  if (w1.dimension() != 2) detail::fail_shape(function, names[1], w1.shape(), "[H, D]");
  const std::size_t hidden = w1.shape()[0], model = w1.shape()[1];
  const auto from_w1 = [&] {
    return std::string("D = ") + std::to_string(model) + ", H = " + std::to_string(hidden) +
           " from " + names[1] + " [H, D]";
  };
  if (x.dimension() == 0 || x.shape().back() != model)
    detail::fail_shape(function, names[0], x.shape(),
                       "[..., " + std::to_string(model) + "] (" + from_w1() + ")");
  expect_shape(function, names[2], b1, {hidden}, from_w1);
  expect_shape(function, names[3], w2, {model, hidden}, from_w1);
  expect_shape(function, names[4], b2, {model}, from_w1);
}

// f(x w1^T + b1) w2^T + b2, the activation fused into the second layer: the
// [..., H] hidden activations are never stored (ops/fused_linear.hpp).
template <class T>
Var<T> two_layer(const Var<T>& x, const Var<T>& w1, const Var<T>& b1, const Var<T>& w2,
                 const Var<T>& b2, Activation activation) {
  return activation_linear(linear(x, w1, b1), activation, w2, b2);
}

// parse_activation, with an error that names `function` and its argument 'activation'.
Activation parse_argument(const char* function, std::string_view name) {
  for (Activation a : {Activation::relu, Activation::gelu, Activation::gelu_tanh,
                       Activation::gelu_sigmoid, Activation::silu})
    if (name == to_string(a)) return a;
  detail::fail_argument(function, "activation",
                        "is '" + std::string(name) +
                            "', not an activation; valid names are relu, gelu, gelu_tanh, "
                            "gelu_sigmoid, silu");
}

constexpr const char* k_positionwise_names[5] = {"x", "w1", "b1", "w2", "b2"};
constexpr const char* k_sublayer_names[5] = {"x", "weight1", "bias1", "weight2", "bias2"};

}  // namespace

template <class T>
Var<T> positionwise_ffn(const Var<T>& x, const Var<T>& w1, const Var<T>& b1, const Var<T>& w2,
                        const Var<T>& b2) {
  check_two_layer("positionwise_ffn", k_positionwise_names, x, w1, b1, w2, b2);
  return two_layer(x, w1, b1, w2, b2, Activation::relu);
}

template <class T>
Var<T> feedforward_sublayer(const Var<T>& x, const Var<T>& weight1, const Var<T>& bias1,
                            const Var<T>& weight2, const Var<T>& bias2) {
  check_two_layer("feedforward_sublayer", k_sublayer_names, x, weight1, bias1, weight2, bias2);
  return two_layer(x, weight1, bias1, weight2, bias2, Activation::gelu);
}

template <class T>
Var<T> feedforward(const Var<T>& x, const Var<T>& w1, const Var<T>& b1, const Var<T>& w2,
                   const Var<T>& b2, Activation activation) {
  check_two_layer("feedforward", k_positionwise_names, x, w1, b1, w2, b2);
  // validates the activation before anything is recorded
  detail::activation_name(activation, "feedforward", "activation");
  return two_layer(x, w1, b1, w2, b2, activation);
}

template <class T>
Var<T> gated_feedforward(const Var<T>& x, const Var<T>& w_up, const Var<T>& w_gate,
                         const Var<T>& w_down, const std::optional<Var<NoDeduce<T>>>& b_up,
                         const std::optional<Var<NoDeduce<T>>>& b_gate,
                         const std::optional<Var<NoDeduce<T>>>& b_down, Activation activation) {
  static constexpr const char* function = "gated_feedforward";
  detail::common_tape<T>(function, {{"x", &x},
                                    {"w_up", &w_up},
                                    {"w_gate", &w_gate},
                                    {"w_down", &w_down},
                                    {"b_up", b_up ? &*b_up : nullptr},
                                    {"b_gate", b_gate ? &*b_gate : nullptr},
                                    {"b_down", b_down ? &*b_down : nullptr}});
  if (w_up.dimension() != 2) detail::fail_shape(function, "w_up", w_up.shape(), "[Cin, H]");
  if (w_down.dimension() != 2) detail::fail_shape(function, "w_down", w_down.shape(), "[H, Cout]");
  const std::size_t in = w_up.shape()[0], hidden = w_up.shape()[1], out = w_down.shape()[1];
  const auto from_up = [&] {
    return "Cin = " + std::to_string(in) + ", H = " + std::to_string(hidden) +
           " from w_up [Cin, H]";
  };
  if (x.dimension() == 0 || x.shape().back() != in)
    detail::fail_shape(function, "x", x.shape(),
                       "[..., " + std::to_string(in) + "] (" + from_up() + ")");
  expect_shape(function, "w_gate", w_gate, {in, hidden}, from_up);
  if (w_down.shape()[0] != hidden)
    detail::fail_shape(function, "w_down", w_down.shape(),
                       "[" + std::to_string(hidden) + ", Cout] (" + from_up() + ")");
  if (b_up) expect_shape(function, "b_up", *b_up, {hidden}, from_up);
  if (b_gate) expect_shape(function, "b_gate", *b_gate, {hidden}, from_up);
  if (b_down)
    expect_shape(function, "b_down", *b_down, {out},
                 [&] { return "Cout = " + std::to_string(out) + " from w_down [H, Cout]"; });
  // validates the activation before anything is recorded
  detail::activation_name(activation, function, "activation");

  const Var<T> u = linear(x, w_up, b_up, WeightLayout::in_out);      // [..., H]
  const Var<T> g = linear(x, w_gate, b_gate, WeightLayout::in_out);  // [..., H]
  // (u * f(g)) w_down + b_down, the gated product fused into the down
  // projection: it is never stored (ops/fused_linear.hpp).
  return gated_linear(u, g, activation, w_down, b_down, WeightLayout::in_out);
}

template <class T>
Var<T> gated_feedforward(const Var<T>& x, const Var<T>& w_up, const Var<T>& w_gate,
                         const Var<T>& w_down, const std::optional<Var<NoDeduce<T>>>& b_up,
                         const std::optional<Var<NoDeduce<T>>>& b_gate,
                         const std::optional<Var<NoDeduce<T>>>& b_down,
                         std::string_view activation) {
  return gated_feedforward(x, w_up, w_gate, w_down, b_up, b_gate, b_down,
                           parse_argument("gated_feedforward", activation));
}

#define XTGRAD_INSTANTIATE_FUNCTIONAL(T)                                                           \
  template Var<T> positionwise_ffn(const Var<T>&, const Var<T>&, const Var<T>&, const Var<T>&,     \
                                   const Var<T>&);                                                 \
  template Var<T> feedforward_sublayer(const Var<T>&, const Var<T>&, const Var<T>&, const Var<T>&, \
                                       const Var<T>&);                                             \
  template Var<T> feedforward(const Var<T>&, const Var<T>&, const Var<T>&, const Var<T>&,          \
                              const Var<T>&, Activation);                                          \
  template Var<T> gated_feedforward(const Var<T>&, const Var<T>&, const Var<T>&, const Var<T>&,    \
                                    const std::optional<Var<T>>&, const std::optional<Var<T>>&,    \
                                    const std::optional<Var<T>>&, Activation);                     \
  template Var<T> gated_feedforward(const Var<T>&, const Var<T>&, const Var<T>&, const Var<T>&,    \
                                    const std::optional<Var<T>>&, const std::optional<Var<T>>&,    \
                                    const std::optional<Var<T>>&, std::string_view);
XTGRAD_INSTANTIATE_FUNCTIONAL(float)
XTGRAD_INSTANTIATE_FUNCTIONAL(double)
#undef XTGRAD_INSTANTIATE_FUNCTIONAL

}  // namespace xtgrad
