// Parameter groups of SGD, Adam and AdamW, and the schedules over them,
// against torch.optim: six steps over two groups with their own
// hyperparameters (tests/support/fixtures/make_param_groups.py).

#include <doctest/doctest.h>

#include <cstddef>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include <xtensor/xarray.hpp>
#include <xtensor/xview.hpp>

#include <xtgrad/optim/optim.hpp>

#include "support/fixtures/fixture_array.hpp"
#include "support/fixtures/param_groups_fixtures.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::optim;
using xtgrad::testing::check_close;
using xtgrad::testing::from_fixture;
namespace fx = xtgrad::fixtures::param_groups;

namespace {

const std::vector<std::size_t> k_weight_shape = {3, 2};
const std::vector<std::size_t> k_bias_shape = {3};

template <class T>
double rtol() {
  return std::is_same_v<T, float> ? 2e-5 : 1e-12;
}
template <class T>
double atol() {
  return std::is_same_v<T, float> ? 2e-6 : 1e-14;
}

// weight (group 0) and bias (group 1) at the fixture's start.
template <class T>
struct TwoParameters {
  Parameter<T> weight{"weight", from_fixture<T>(fx::weight0, k_weight_shape)};
  Parameter<T> bias{"bias", from_fixture<T>(fx::bias0, k_bias_shape)};
};

// Runs the fixture's six steps (optimizer.step(), then schedule.step()) and
// compares both parameters and both groups' lrs after each step.
template <class T, class Expected>
void check_steps(TwoParameters<T>& p, Optimizer<T>& optimizer, LRScheduler<T>& schedule,
                 const Expected& expected) {
  for (int s = 0; s < fx::steps; ++s) {
    CAPTURE(s);
    p.weight.grad = from_fixture<T>(fx::grad_weight + 6 * s, k_weight_shape);
    p.bias.grad = from_fixture<T>(fx::grad_bias + 3 * s, k_bias_shape);
    p.weight.has_grad = p.bias.has_grad = true;
    optimizer.step();
    schedule.step();
    check_close(p.weight.value, from_fixture<double>(expected.weight + 6 * s, k_weight_shape),
                rtol<T>(), atol<T>());
    check_close(p.bias.value, from_fixture<double>(expected.bias + 3 * s, k_bias_shape), rtol<T>(),
                atol<T>());
    CHECK(optimizer.lr(0) == doctest::Approx(expected.lr0[s]).epsilon(1e-12));
    CHECK(optimizer.lr(1) == doctest::Approx(expected.lr1[s]).epsilon(1e-12));
  }
}

struct SgdExpected {
  const double* weight = fx::sgd::weight;
  const double* bias = fx::sgd::bias;
  const double* lr0 = fx::sgd::lr0;
  const double* lr1 = fx::sgd::lr1;
};
struct AdamExpected {
  const double* weight = fx::adam::weight;
  const double* bias = fx::adam::bias;
  const double* lr0 = fx::adam::lr0;
  const double* lr1 = fx::adam::lr1;
};
struct AdamWExpected {
  const double* weight = fx::adamw::weight;
  const double* bias = fx::adamw::bias;
  const double* lr0 = fx::adamw::lr0;
  const double* lr1 = fx::adamw::lr1;
};

}  // namespace

TEST_CASE_TEMPLATE("param groups: SGD with two groups and StepLR matches torch.optim", T, float,
                   double) {
  TwoParameters<T> p;
  SGD<T> sgd({{{&p.weight}, SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(0.05)},
              {{&p.bias}, SGDOptions(0.02).momentum(0.5).dampening(0.1)}});
  StepLR<T> schedule(sgd, 2, 0.5);
  REQUIRE(sgd.group_count() == 2);
  check_steps(p, sgd, schedule, SgdExpected{});
  check_close(sgd.state(0)->momentum_buffer,
              from_fixture<double>(fx::sgd::momentum_buffer_weight, k_weight_shape), rtol<T>(),
              atol<T>());
  check_close(sgd.state(1)->momentum_buffer,
              from_fixture<double>(fx::sgd::momentum_buffer_bias, k_bias_shape), rtol<T>(),
              atol<T>());
}

TEST_CASE_TEMPLATE("param groups: Adam with two groups and a linear warm-up matches torch.optim", T,
                   float, double) {
  TwoParameters<T> p;
  Adam<T> adam({{{&p.weight}, AdamOptions(0.1).weight_decay(0.05)},
                {{&p.bias}, AdamOptions(0.02).betas({0.8, 0.95}).eps(1e-6).amsgrad(true)}});
  LinearWarmup<T> schedule(adam, 3, 0.25);  // LinearLR(start_factor 0.25, total_iters 3)
  check_steps(p, adam, schedule, AdamExpected{});
  const AdamParamState<T>& w = *adam.state(0);
  const AdamParamState<T>& b = *adam.state(1);
  CHECK(w.step == fx::adam::step);
  CHECK(b.step == fx::adam::step);
  check_close(w.exp_avg, from_fixture<double>(fx::adam::exp_avg_weight, k_weight_shape), rtol<T>(),
              atol<T>());
  check_close(w.exp_avg_sq, from_fixture<double>(fx::adam::exp_avg_sq_weight, k_weight_shape),
              rtol<T>(), atol<T>());
  check_close(b.exp_avg, from_fixture<double>(fx::adam::exp_avg_bias, k_bias_shape), rtol<T>(),
              atol<T>());
  check_close(b.exp_avg_sq, from_fixture<double>(fx::adam::exp_avg_sq_bias, k_bias_shape),
              rtol<T>(), atol<T>());
  check_close(b.max_exp_avg_sq, from_fixture<double>(fx::adam::max_exp_avg_sq_bias, k_bias_shape),
              rtol<T>(), atol<T>());
  CHECK(w.max_exp_avg_sq.dimension() == 0);  // never allocated: group 0 has amsgrad off
}

TEST_CASE_TEMPLATE("param groups: AdamW with two groups and cosine annealing matches torch.optim",
                   T, float, double) {
  TwoParameters<T> p;
  AdamW<T> adamw({{{&p.weight}, AdamWOptions(0.1).weight_decay(0.1).amsgrad(true)},
                  {{&p.bias}, AdamWOptions(0.02).betas({0.85, 0.99}).weight_decay(0.0)}});
  CosineAnnealingLR<T> schedule(adamw, 4, 0.001);
  check_steps(p, adamw, schedule, AdamWExpected{});
  const AdamParamState<T>& w = *adamw.state(0);
  const AdamParamState<T>& b = *adamw.state(1);
  CHECK(w.step == fx::adamw::step);
  check_close(w.exp_avg, from_fixture<double>(fx::adamw::exp_avg_weight, k_weight_shape), rtol<T>(),
              atol<T>());
  check_close(w.max_exp_avg_sq,
              from_fixture<double>(fx::adamw::max_exp_avg_sq_weight, k_weight_shape), rtol<T>(),
              atol<T>());
  check_close(b.exp_avg_sq, from_fixture<double>(fx::adamw::exp_avg_sq_bias, k_bias_shape),
              rtol<T>(), atol<T>());
}

TEST_CASE_TEMPLATE("param groups: lr, set_lr and options per group", T, float, double) {
  Parameter<T> a("a", xt::xarray<T>{1, 2});
  Parameter<T> b("b", xt::xarray<T>{3});
  Parameter<T> c("c", xt::xarray<T>{4, 5, 6});
  AdamW<T> adamw({{{&a, &b}, AdamWOptions(0.1).weight_decay(0.2)},
                  {{}, AdamWOptions(0.5)},  // an empty group is allowed, as in torch
                  {{&c}, AdamWOptions(0.3).weight_decay(0.0).eps(1e-6)}});
  REQUIRE(adamw.group_count() == 3);
  CHECK(adamw.parameters() == std::vector<Parameter<T>*>{&a, &b, &c});
  CHECK(adamw.group_begin(0) == 0);
  CHECK(adamw.group_end(0) == 2);
  CHECK(adamw.group_begin(1) == 2);
  CHECK(adamw.group_end(1) == 2);
  CHECK(adamw.group_begin(2) == 2);
  CHECK(adamw.group_end(2) == 3);
  CHECK(adamw.lr() == 0.1);
  CHECK(adamw.lr(2) == 0.3);
  CHECK(adamw.options(2).eps() == 1e-6);
  CHECK(adamw.options(0).weight_decay() == 0.2);
  adamw.set_lr(2, 0.03);
  CHECK(adamw.lr(0) == 0.1);
  CHECK(adamw.options(2).lr() == 0.03);
  adamw.set_lr(0.07);  // every group
  for (std::size_t g = 0; g < 3; ++g) CHECK(adamw.lr(g) == 0.07);
  CHECK_THROWS_AS(adamw.lr(3), std::invalid_argument);
  CHECK_THROWS_AS(adamw.set_lr(3, 0.1), std::invalid_argument);
  CHECK_THROWS_WITH_PARTS(adamw.options(3), std::invalid_argument,
                          {"xtgrad::AdamW::options: argument 'group' is 3, expected less than 3"});

  // Each group steps with its own lr and weight decay: c has no decay, so
  // with a zero gradient it does not move, while a and b shrink.
  a.has_grad = b.has_grad = c.has_grad = true;
  a.grad = xt::zeros<T>({2});
  b.grad = xt::zeros<T>({1});
  c.grad = xt::zeros<T>({3});
  adamw.step();
  CHECK(c.value == xt::xarray<T>{4, 5, 6});
  CHECK(b.value(0) == T(3 * (1 - 0.07 * 0.2)));
}

TEST_CASE_TEMPLATE("param groups: a schedule scales each group's own base lr", T, float, double) {
  Parameter<T> a("a", xt::xarray<T>{1});
  Parameter<T> b("b", xt::xarray<T>{2});
  SGD<T> sgd({{{&a}, SGDOptions(0.4)}, {{&b}, SGDOptions(0.1)}});
  WarmupCosineLR<T> schedule(sgd, 2, 4, 0.5, 0.0);
  CHECK(schedule.base_lrs() == std::vector<double>{0.4, 0.1});
  // t = 0: start_factor * base; t = 1: halfway up; t = 2: base; t = 4: half way down.
  CHECK(sgd.lr(0) == doctest::Approx(0.2));
  CHECK(sgd.lr(1) == doctest::Approx(0.05));
  schedule.step();
  CHECK(sgd.lr(0) == doctest::Approx(0.3));
  CHECK(sgd.lr(1) == doctest::Approx(0.075));
  schedule.step();
  schedule.step();
  schedule.step();
  CHECK(schedule.last_epoch() == 4);
  CHECK(sgd.lr(0) == doctest::Approx(0.2));
  CHECK(sgd.lr(1) == doctest::Approx(0.05));
  CHECK(schedule.last_lrs() == std::vector<double>{sgd.lr(0), sgd.lr(1)});
  CHECK(schedule.lr_at(6, 1) == 0.0);
}

TEST_CASE_TEMPLATE("param groups: a parameter in two groups or a bad group lr throws", T, float,
                   double) {
  Parameter<T> a("a", xt::xarray<T>{1});
  Parameter<T> b("b", xt::xarray<T>{2});
  CHECK_THROWS_WITH_AS(SGD<T>({{{&a}, SGDOptions(0.1)}, {{&b, &a}, SGDOptions(0.1)}}),
                       doctest::Contains("holds parameter 'a' twice (positions 0 and 2)"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(Adam<T>({{{&a}, AdamOptions(0.1)}, {{&b}, AdamOptions(-1.0)}}),
                       doctest::Contains("Adam param group 1: argument 'lr'"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(
      AdamW<T>({{{&a}, AdamWOptions(0.1)}, {{&b}, AdamWOptions(0.1).betas({0.9, 1.0})}}),
      doctest::Contains("AdamW param group 1: argument 'betas[1]'"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(SGD<T>(std::vector<SGDParamGroup<T>>{}),
                       doctest::Contains("'params' is empty"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(SGD<T>({{{}, SGDOptions(0.1)}}), doctest::Contains("'params' is empty"),
                       std::invalid_argument);
}
