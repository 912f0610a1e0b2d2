#include "functional.hpp"

#include <string>

#include "../engine/check.hpp"
#include "../engine/ops/activations.hpp"
#include "../engine/ops/gated.hpp"
#include "../engine/ops/linear.hpp"

namespace xtgrad {

namespace {

std::string shape_of(std::size_t a) {
  return "[" + std::to_string(a) + "]";
}
std::string shape_of(std::size_t a, std::size_t b) {
  return "[" + std::to_string(a) + ", " + std::to_string(b) + "]";
}

template <class T>
void expect_shape(const char* function, const char* arg, const Var<T>& v,
                  const std::string& expected, const std::string& why) {
  if (detail::shape_str(v.shape()) != expected)
    detail::fail_shape(function, arg, v.shape(), expected + " (" + why + ")");
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
  const std::string from_w1 = std::string("D = ") + std::to_string(model) +
                              ", H = " + std::to_string(hidden) + " from " + names[1] + " [H, D]";
  if (x.dimension() == 0 || x.shape().back() != model)
    detail::fail_shape(function, names[0], x.shape(),
                       "[..., " + std::to_string(model) + "] (" + from_w1 + ")");
  expect_shape(function, names[2], b1, shape_of(hidden), from_w1);
  expect_shape(function, names[3], w2, shape_of(model, hidden), from_w1);
  expect_shape(function, names[4], b2, shape_of(model), from_w1);
}

template <class T>
Var<T> two_layer(const Var<T>& x, const Var<T>& w1, const Var<T>& b1, const Var<T>& w2,
                 const Var<T>& b2, Activation activation) {
  return linear(xtgrad::activation(linear(x, w1, b1), activation), w2, b2);
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
  const std::string from_up =
      "Cin = " + std::to_string(in) + ", H = " + std::to_string(hidden) + " from w_up [Cin, H]";
  if (x.dimension() == 0 || x.shape().back() != in)
    detail::fail_shape(function, "x", x.shape(),
                       "[..., " + std::to_string(in) + "] (" + from_up + ")");
  expect_shape(function, "w_gate", w_gate, shape_of(in, hidden), from_up);
  if (w_down.shape()[0] != hidden)
    detail::fail_shape(function, "w_down", w_down.shape(),
                       "[" + std::to_string(hidden) + ", Cout] (" + from_up + ")");
  if (b_up) expect_shape(function, "b_up", *b_up, shape_of(hidden), from_up);
  if (b_gate) expect_shape(function, "b_gate", *b_gate, shape_of(hidden), from_up);
  if (b_down)
    expect_shape(function, "b_down", *b_down, shape_of(out),
                 "Cout = " + std::to_string(out) + " from w_down [H, Cout]");

  const Var<T> u = linear(x, w_up, b_up, WeightLayout::in_out);      // [..., H]
  const Var<T> g = linear(x, w_gate, b_gate, WeightLayout::in_out);  // [..., H]
  return linear(gated(u, g, activation), w_down, b_down, WeightLayout::in_out);
}

template <class T>
Var<T> gated_feedforward(const Var<T>& x, const Var<T>& w_up, const Var<T>& w_gate,
                         const Var<T>& w_down, const std::optional<Var<NoDeduce<T>>>& b_up,
                         const std::optional<Var<NoDeduce<T>>>& b_gate,
                         const std::optional<Var<NoDeduce<T>>>& b_down,
                         std::string_view activation) {
  return gated_feedforward(x, w_up, w_gate, w_down, b_up, b_gate, b_down,
                           parse_activation(activation));
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
