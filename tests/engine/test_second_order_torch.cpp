// Second-order results against torch 1.13 (tests/support/fixtures/
// make_second_order.py): a WGAN-GP gradient penalty on a tanh critic and its
// gradient with respect to the critic's parameters, and Hessian-vector
// products of the toy FFN's MSE loss, in double (1e-10) and float (2e-4).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <xtgrad/engine/engine.hpp>

#include "support/fixtures/fixture_array.hpp"
#include "support/fixtures/second_order_fixtures.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;
namespace fx = xtgrad::fixtures::second_order;

namespace {

template <class T>
constexpr double rtol() {
  return std::is_same_v<T, float> ? 2e-4 : 1e-10;
}
template <class T>
constexpr double atol() {
  return std::is_same_v<T, float> ? 2e-5 : 1e-12;
}

template <class T, std::size_t R, std::size_t N>
Parameter<T> param(const char* name, const std::size_t (&shape)[R], const double (&values)[N]) {
  return Parameter<T>(name, fixture_array<T>(shape, values));
}

}  // namespace

TEST_CASE_TEMPLATE("second order vs torch: the WGAN-GP gradient penalty of a tanh critic", T, float,
                   double) {
  Tape<T> tape;
  Parameter<T> w1 = param<T>("w1", fx::k_gp_w1_shape, fx::k_gp_w1);
  Parameter<T> b1 = param<T>("b1", fx::k_gp_b1_shape, fx::k_gp_b1);
  Parameter<T> w2 = param<T>("w2", fx::k_gp_w2_shape, fx::k_gp_w2);
  Parameter<T> b2 = param<T>("b2", fx::k_gp_b2_shape, fx::k_gp_b2);
  const Var<T> x = tape.leaf(fixture_array<T>(fx::k_gp_x_shape, fx::k_gp_x));
  // D(x) [5, 1] = W2 tanh(W1 x + b1) + b2; dD/dx [5, 3] recorded
  const Var<T> critic =
      linear(tanh(linear(x, tape.param(w1), tape.param(b1))), tape.param(w2), tape.param(b2));
  const Var<T> dx = grad(tape, {sum(critic)}, {x}, GradOptions<T>{{}, true})[0];
  // mean_i (||dD/dx_i|| - 1)^2
  const Var<T> norms = sqrt(sum(mul(dx, dx), 1));
  const Var<T> penalty = mean(square(add_scalar(norms, T(-1))));
  check_close(penalty.value(), xt::xarray<double>(fx::k_gp_penalty[0]), rtol<T>(), atol<T>());
  tape.backward(penalty);
  check_close(w1.grad, fixture_array<double>(fx::k_gp_grad_w1_shape, fx::k_gp_grad_w1), rtol<T>(),
              atol<T>());
  check_close(b1.grad, fixture_array<double>(fx::k_gp_grad_b1_shape, fx::k_gp_grad_b1), rtol<T>(),
              atol<T>());
  check_close(w2.grad, fixture_array<double>(fx::k_gp_grad_w2_shape, fx::k_gp_grad_w2), rtol<T>(),
              atol<T>());
  CHECK(!b2.has_grad);  // b2 does not reach the penalty (torch leaves its grad None)
}

TEST_CASE_TEMPLATE("second order vs torch: hvp of the toy FFN's MSE loss (tanh and relu)", T, float,
                   double) {
  for (const std::string act : {"tanh", "relu"}) {
    INFO("activation " << act);
    Tape<T> tape;
    Parameter<T> w1 = param<T>("w1", fx::k_ffn_w1_shape, fx::k_ffn_w1);
    Parameter<T> b1 = param<T>("b1", fx::k_ffn_b1_shape, fx::k_ffn_b1);
    Parameter<T> w2 = param<T>("w2", fx::k_ffn_w2_shape, fx::k_ffn_w2);
    Parameter<T> b2 = param<T>("b2", fx::k_ffn_b2_shape, fx::k_ffn_b2);
    const Var<T> x = tape.leaf(fixture_array<T>(fx::k_ffn_x_shape, fx::k_ffn_x), false);
    const Var<T> t = tape.leaf(fixture_array<T>(fx::k_ffn_target_shape, fx::k_ffn_target), false);
    const Var<T> h = linear(x, tape.param(w1), tape.param(b1));
    // relu as clamp_min(h, 0): the same function and, away from 0, the same derivatives
    const Var<T> a = act == "tanh" ? tanh(h) : clamp_min(h, T(0));
    const Var<T> loss = mean(square(sub(linear(a, tape.param(w2), tape.param(b2)), t)));
    const std::vector<xt::xarray<T>> v = {fixture_array<T>(fx::k_ffn_v_w1_shape, fx::k_ffn_v_w1),
                                          fixture_array<T>(fx::k_ffn_v_b1_shape, fx::k_ffn_v_b1),
                                          fixture_array<T>(fx::k_ffn_v_w2_shape, fx::k_ffn_v_w2),
                                          fixture_array<T>(fx::k_ffn_v_b2_shape, fx::k_ffn_v_b2)};
    const std::vector<Var<T>> hv = hvp(tape, loss, {w1, b1, w2, b2}, v);
    const bool is_tanh = act == "tanh";
    check_close(loss.value(),
                xt::xarray<double>(is_tanh ? fx::k_ffn_tanh_loss[0] : fx::k_ffn_relu_loss[0]),
                rtol<T>(), atol<T>());
    check_close(hv[0].value(),
                fixture_array<double>(fx::k_ffn_tanh_hvp_w1_shape,
                                      is_tanh ? fx::k_ffn_tanh_hvp_w1 : fx::k_ffn_relu_hvp_w1),
                rtol<T>(), atol<T>());
    check_close(hv[1].value(),
                fixture_array<double>(fx::k_ffn_tanh_hvp_b1_shape,
                                      is_tanh ? fx::k_ffn_tanh_hvp_b1 : fx::k_ffn_relu_hvp_b1),
                rtol<T>(), atol<T>());
    check_close(hv[2].value(),
                fixture_array<double>(fx::k_ffn_tanh_hvp_w2_shape,
                                      is_tanh ? fx::k_ffn_tanh_hvp_w2 : fx::k_ffn_relu_hvp_w2),
                rtol<T>(), atol<T>());
    check_close(hv[3].value(),
                fixture_array<double>(fx::k_ffn_tanh_hvp_b2_shape,
                                      is_tanh ? fx::k_ffn_tanh_hvp_b2 : fx::k_ffn_relu_hvp_b2),
                rtol<T>(), atol<T>());
    CHECK(!w1.has_grad);
  }
}
