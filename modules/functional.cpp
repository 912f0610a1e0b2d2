#include "functional.hpp"

#include <string>

#include "../engine/check.hpp"
#include "../engine/errors.hpp"
#include "../engine/ops/fused_linear.hpp"

namespace xtgrad {

namespace {

// Throws unless `shape` is exactly {expected...}; `why` says where the
// expected sizes come from. The message is built only on failure (these
// checks run at every step of a training loop).
template <class Why>
void expect_shape(const char* function, const char* arg, const Shape& shape,
                  std::initializer_list<std::size_t> expected, const Why& why) {
  if (!std::equal(shape.begin(), shape.end(), expected.begin(), expected.end()))
    detail::fail_shape(function, arg, shape,
                       detail::shape_str(std::vector<std::size_t>(expected)) + " (" + why() + ")");
}

// The dimensions of x [..., in] -> [..., out] in a block whose shapes are checked.
detail::LinearDims dims_of(const Shape& x, std::size_t in, std::size_t out) {
  Shape y = x;
  y.back() = out;
  return {in, out, detail::leading_rows(x), y};
}

// parse_activation, with an error that names `function` and its argument 'activation'.
Activation parse_argument(const char* function, std::string_view name) {
  if (const std::optional<Activation> a = detail::find_activation(name)) return *a;
  detail::fail_argument(function, "activation",
                        "is '" + std::string(name) + "', not an activation; valid names are " +
                            detail::valid_activation_names());
}

constexpr detail::TwoLayerNames k_positionwise_names = {"x", "w1", "b1", "w2", "b2"};
constexpr detail::TwoLayerNames k_sublayer_names = {"x", "weight1", "bias1", "weight2", "bias2"};

template <class T>
const Shape* shape_or_null(const std::optional<Var<T>>& v, Shape& storage) {
  if (!v) return nullptr;
  storage = v->shape();
  return &storage;
}

}  // namespace

namespace detail {

TwoLayerDims check_two_layer(const char* function, const TwoLayerNames& names, const Shape& x,
                             const Shape& w1, const Shape& b1, const Shape& w2, const Shape& b2,
                             Activation activation) {
  if (w1.size() != 2) fail_shape(function, names[1], w1, "[H, D]");
  const std::size_t hidden = w1[0], model = w1[1];
  const auto from_w1 = [&] {
    return std::string("D = ") + std::to_string(model) + ", H = " + std::to_string(hidden) +
           " from " + names[1] + " [H, D]";
  };
  if (x.empty() || x.back() != model)
    fail_shape(function, names[0], x, "[..., " + std::to_string(model) + "] (" + from_w1() + ")");
  expect_shape(function, names[2], b1, {hidden}, from_w1);
  expect_shape(function, names[3], w2, {model, hidden}, from_w1);
  expect_shape(function, names[4], b2, {model}, from_w1);
  activation_name(activation, function, "activation");  // validates it
  return {dims_of(x, model, hidden), dims_of(x, hidden, model)};
}

GatedDims check_gated(const Shape& x, const Shape& w_up, const Shape& w_gate, const Shape& w_down,
                      const Shape* b_up, const Shape* b_gate, const Shape* b_down,
                      Activation activation) {
  static constexpr const char* function = "gated_feedforward";
  if (w_up.size() != 2) fail_shape(function, "w_up", w_up, "[Cin, H]");
  if (w_down.size() != 2) fail_shape(function, "w_down", w_down, "[H, Cout]");
  const std::size_t in = w_up[0], hidden = w_up[1], out = w_down[1];
  const auto from_up = [&] {
    return "Cin = " + std::to_string(in) + ", H = " + std::to_string(hidden) +
           " from w_up [Cin, H]";
  };
  if (x.empty() || x.back() != in)
    fail_shape(function, "x", x, "[..., " + std::to_string(in) + "] (" + from_up() + ")");
  expect_shape(function, "w_gate", w_gate, {in, hidden}, from_up);
  if (w_down[0] != hidden)
    fail_shape(function, "w_down", w_down,
               "[" + std::to_string(hidden) + ", Cout] (" + from_up() + ")");
  if (b_up) expect_shape(function, "b_up", *b_up, {hidden}, from_up);
  if (b_gate) expect_shape(function, "b_gate", *b_gate, {hidden}, from_up);
  if (b_down)
    expect_shape(function, "b_down", *b_down, {out},
                 [&] { return "Cout = " + std::to_string(out) + " from w_down [H, Cout]"; });
  activation_name(activation, function, "activation");  // validates it
  const LinearDims up = dims_of(x, in, hidden);
  return {up, up, dims_of(x, hidden, out)};
}

template <class T>
Var<T> record_two_layer(const TwoLayerDims& dims, const Var<T>& x, const Var<T>& w1,
                        const Var<T>& b1, const Var<T>& w2, const Var<T>& b2, Activation activation,
                        const std::optional<HiddenDropout>& dropout) {
  const Var<T> hidden = record_linear<T>(dims.first, x, w1, b1, WeightLayout::out_in);  // [..., H]
  // f(hidden) w2^T + b2, the activation fused into the second layer: f(hidden)
  // is never stored (ops/fused_linear.hpp).
  if (dropout)  // and the hidden dropout, inside the same fused op
    return record_activation_linear<T>(dims.second, hidden, activation, w2, b2,
                                       WeightLayout::out_in, dropout);
  return record_activation_linear<T>(dims.second, hidden, activation, w2, b2, WeightLayout::out_in);
}

template <class T>
Var<T> record_gated(const GatedDims& dims, const Var<T>& x, const Var<T>& w_up,
                    const Var<T>& w_gate, const Var<T>& w_down,
                    const std::optional<Var<NoDeduce<T>>>& b_up,
                    const std::optional<Var<NoDeduce<T>>>& b_gate,
                    const std::optional<Var<NoDeduce<T>>>& b_down, Activation activation,
                    const std::optional<HiddenDropout>& dropout) {
  const Var<T> u = record_linear<T>(dims.up, x, w_up, b_up, WeightLayout::in_out);  // [..., H]
  const Var<T> g =
      record_linear<T>(dims.gate, x, w_gate, b_gate, WeightLayout::in_out);  // [..., H]
  // (u * f(g)) w_down + b_down, the gated product fused into the down
  // projection: it is never stored (ops/fused_linear.hpp).
  if (dropout)  // and the hidden dropout, inside the same fused op
    return record_gated_linear<T>(dims.down, u, g, activation, w_down, b_down, WeightLayout::in_out,
                                  dropout);
  return record_gated_linear<T>(dims.down, u, g, activation, w_down, b_down, WeightLayout::in_out);
}

}  // namespace detail

template <class T>
Var<T> positionwise_ffn(const Var<T>& x, const Var<T>& w1, const Var<T>& b1, const Var<T>& w2,
                        const Var<T>& b2) {
  static constexpr const char* function = "positionwise_ffn";
  const auto& n = k_positionwise_names;
  detail::common_tape<T>(function,
                         {{n[0], &x}, {n[1], &w1}, {n[2], &b1}, {n[3], &w2}, {n[4], &b2}});
  const detail::TwoLayerDims dims = detail::check_two_layer(
      function, n, x.shape(), w1.shape(), b1.shape(), w2.shape(), b2.shape(), Activation::relu);
  return detail::record_two_layer(dims, x, w1, b1, w2, b2, Activation::relu);
}

template <class T>
Var<T> feedforward_sublayer(const Var<T>& x, const Var<T>& weight1, const Var<T>& bias1,
                            const Var<T>& weight2, const Var<T>& bias2) {
  static constexpr const char* function = "feedforward_sublayer";
  const auto& n = k_sublayer_names;
  detail::common_tape<T>(
      function, {{n[0], &x}, {n[1], &weight1}, {n[2], &bias1}, {n[3], &weight2}, {n[4], &bias2}});
  const detail::TwoLayerDims dims =
      detail::check_two_layer(function, n, x.shape(), weight1.shape(), bias1.shape(),
                              weight2.shape(), bias2.shape(), Activation::gelu);
  return detail::record_two_layer(dims, x, weight1, bias1, weight2, bias2, Activation::gelu);
}

template <class T>
Var<T> feedforward(const Var<T>& x, const Var<T>& w1, const Var<T>& b1, const Var<T>& w2,
                   const Var<T>& b2, Activation activation) {
  static constexpr const char* function = "feedforward";
  const auto& n = k_positionwise_names;
  detail::common_tape<T>(function,
                         {{n[0], &x}, {n[1], &w1}, {n[2], &b1}, {n[3], &w2}, {n[4], &b2}});
  const detail::TwoLayerDims dims = detail::check_two_layer(
      function, n, x.shape(), w1.shape(), b1.shape(), w2.shape(), b2.shape(), activation);
  return detail::record_two_layer(dims, x, w1, b1, w2, b2, activation);
}

template <class T>
Var<T> gated_feedforward(const Var<T>& x, const Var<T>& w_up, const Var<T>& w_gate,
                         const Var<T>& w_down, const std::optional<Var<NoDeduce<T>>>& b_up,
                         const std::optional<Var<NoDeduce<T>>>& b_gate,
                         const std::optional<Var<NoDeduce<T>>>& b_down, Activation activation) {
  detail::common_tape<T>("gated_feedforward", {{"x", &x},
                                               {"w_up", &w_up},
                                               {"w_gate", &w_gate},
                                               {"w_down", &w_down},
                                               {"b_up", b_up ? &*b_up : nullptr},
                                               {"b_gate", b_gate ? &*b_gate : nullptr},
                                               {"b_down", b_down ? &*b_down : nullptr}});
  Shape up_storage, gate_storage, down_storage;
  const detail::GatedDims dims = detail::check_gated(
      x.shape(), w_up.shape(), w_gate.shape(), w_down.shape(), shape_or_null(b_up, up_storage),
      shape_or_null(b_gate, gate_storage), shape_or_null(b_down, down_storage), activation);
  return detail::record_gated(dims, x, w_up, w_gate, w_down, b_up, b_gate, b_down, activation);
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
                                    const std::optional<Var<T>>&, std::string_view);               \
  template Var<T> detail::record_two_layer(const TwoLayerDims&, const Var<T>&, const Var<T>&,      \
                                           const Var<T>&, const Var<T>&, const Var<T>&,            \
                                           Activation, const std::optional<HiddenDropout>&);       \
  template Var<T> detail::record_gated(const GatedDims&, const Var<T>&, const Var<T>&,             \
                                       const Var<T>&, const Var<T>&, const std::optional<Var<T>>&, \
                                       const std::optional<Var<T>>&, const std::optional<Var<T>>&, \
                                       Activation, const std::optional<HiddenDropout>&);
XTGRAD_INSTANTIATE_FUNCTIONAL(float)
XTGRAD_INSTANTIATE_FUNCTIONAL(double)
#undef XTGRAD_INSTANTIATE_FUNCTIONAL

}  // namespace xtgrad
