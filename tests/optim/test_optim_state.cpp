// state_dict / load_state_dict of SGD, Adam, AdamW and the schedules: the
// entries (against hand-computed values), the round trip into fresh objects
// (the following steps agree bit for bit), and that a load restores the
// hyperparameters. The refused state dicts are rows of
// tests/hardening/test_bad_input_optim.cpp.

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

#include <xtgrad/optim/optim.hpp>

#include "support/bit_equal.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::optim;
using xtgrad::testing::bit_equal;
using xtgrad::testing::check_close;

namespace {

template <class T>
std::vector<std::string> array_names(const StateDict<T>& s) {
  std::vector<std::string> out;
  for (const auto& entry : s.arrays) out.push_back(entry.first);
  return out;
}

template <class T>
struct Params {
  Parameter<T> w{"w", xt::xarray<T>{{1, -2}, {0.5, 3}}};
  Parameter<T> b{"b", xt::xarray<T>{0.25, -0.5}};
  void grads(double scale) {
    w.grad = xt::xarray<T>{{T(0.5 * scale), T(-1 * scale)}, {T(2 * scale), T(0)}};
    b.grad = xt::xarray<T>{T(0.25 * scale), T(-0.75 * scale)};
    w.has_grad = b.has_grad = true;
  }
};

}  // namespace

TEST_CASE_TEMPLATE("optim state: SGD's entries after one step", T, float, double) {
  Params<T> p;
  SGD<T> sgd({{{&p.w}, SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(0.01)},
              {{&p.b}, SGDOptions(0.2)}});  // no momentum: no buffer for b
  StateDict<T> before = sgd.state_dict();
  CHECK(before.arrays.empty());
  p.grads(1.0);
  sgd.step();
  const StateDict<T> s = sgd.state_dict();
  CHECK(s.strings == std::map<std::string, std::string>{{"type", "SGD"}});
  CHECK(s.integers.at("param_groups") == 2);
  CHECK(s.integers.at("param_groups.0.params") == 1);
  CHECK(s.integers.at("param_groups.1.params") == 1);
  CHECK(s.integers.at("param_groups.0.nesterov") == 1);
  CHECK(s.integers.at("param_groups.1.nesterov") == 0);
  CHECK(s.reals.at("param_groups.0.lr") == 0.1);
  CHECK(s.reals.at("param_groups.1.lr") == 0.2);
  CHECK(s.reals.at("param_groups.0.momentum") == 0.9);
  CHECK(s.reals.at("param_groups.1.momentum") == 0.0);
  CHECK(s.reals.at("param_groups.0.dampening") == 0.0);
  CHECK(s.reals.at("param_groups.0.weight_decay") == 0.01);
  CHECK(array_names(s) == std::vector<std::string>{"state.0.momentum_buffer"});
  // First step: buf = g + wd * p.
  check_close(s.arrays.at("state.0.momentum_buffer"),
              xt::xarray<double>{{0.5 + 0.01 * 1, -1 + 0.01 * -2}, {2 + 0.01 * 0.5, 0.03}}, 1e-6,
              1e-7);
  CHECK(s.reals.size() == 8);
  CHECK(s.integers.size() == 5);
}

TEST_CASE_TEMPLATE("optim state: Adam's and AdamW's entries after one and two steps", T, float,
                   double) {
  Params<T> p;
  AdamW<T> adamw({{{&p.w}, AdamWOptions(0.1).betas({0.8, 0.9}).amsgrad(true)},
                  {{&p.b}, AdamWOptions(0.05).eps(1e-6).weight_decay(0.0)}});
  p.grads(1.0);
  adamw.step();
  StateDict<T> s = adamw.state_dict();
  CHECK(s.strings.at("type") == "AdamW");
  CHECK(s.integers.at("state.0.step") == 1);
  CHECK(s.integers.at("state.1.step") == 1);
  CHECK(s.integers.at("param_groups.0.amsgrad") == 1);
  CHECK(s.integers.at("param_groups.1.amsgrad") == 0);
  CHECK(s.reals.at("param_groups.0.beta1") == 0.8);
  CHECK(s.reals.at("param_groups.0.beta2") == 0.9);
  CHECK(s.reals.at("param_groups.1.beta1") == 0.9);
  CHECK(s.reals.at("param_groups.1.eps") == 1e-6);
  CHECK(s.reals.at("param_groups.0.weight_decay") == 1e-2);
  CHECK(array_names(s) == std::vector<std::string>{"state.0.exp_avg", "state.0.exp_avg_sq",
                                                   "state.0.max_exp_avg_sq", "state.1.exp_avg",
                                                   "state.1.exp_avg_sq"});
  // exp_avg = (1 - beta1) g, exp_avg_sq = (1 - beta2) g^2 after the first step.
  check_close(s.arrays.at("state.0.exp_avg"), xt::xarray<double>{{0.1, -0.2}, {0.4, 0}}, 1e-6,
              1e-7);
  check_close(s.arrays.at("state.0.exp_avg_sq"), xt::xarray<double>{{0.025, 0.1}, {0.4, 0}}, 1e-6,
              1e-7);
  check_close(s.arrays.at("state.1.exp_avg"), xt::xarray<double>{0.025, -0.075}, 1e-6, 1e-7);
  p.grads(-0.5);
  adamw.step();
  s = adamw.state_dict();
  CHECK(s.integers.at("state.0.step") == 2);
}

TEST_CASE_TEMPLATE("optim state: a loaded optimizer continues bit for bit", T, float, double) {
  const auto run = [](auto& optimizer, Params<T>& p, int from, int to) {
    for (int s = from; s < to; ++s) {
      p.grads(1.0 + 0.25 * s);
      optimizer.step();
    }
  };
  SUBCASE("Adam with amsgrad") {
    Params<T> a, b;
    Adam<T> first({{{&a.w}, AdamOptions(0.1).amsgrad(true)}, {{&a.b}, AdamOptions(0.01)}});
    run(first, a, 0, 3);
    b = a;  // the parameters travel with the model (a checkpoint)
    Adam<T> second({{{&b.w}, AdamOptions(0.5)}, {{&b.b}, AdamOptions(0.5).amsgrad(true)}});
    second.load_state_dict(first.state_dict());
    CHECK(second.lr(0) == 0.1);  // the loaded hyperparameters replace the constructor's
    CHECK(second.options(0).amsgrad());
    CHECK_FALSE(second.options(1).amsgrad());
    CHECK(second.state(0)->step == 3);
    run(first, a, 3, 6);
    run(second, b, 3, 6);
    CHECK(bit_equal(a.w.value, b.w.value));
    CHECK(bit_equal(a.b.value, b.b.value));
    CHECK(bit_equal(first.state(0)->max_exp_avg_sq, second.state(0)->max_exp_avg_sq));
  }
  SUBCASE("SGD with momentum, and a state with no step taken yet") {
    Params<T> a, b;
    SGD<T> first({&a.w, &a.b}, SGDOptions(0.1).momentum(0.9).dampening(0.2));
    SGD<T> untouched({&b.w, &b.b}, SGDOptions(0.1).momentum(0.9).dampening(0.2));
    SGD<T> second({&b.w, &b.b}, SGDOptions(0.3));
    second.load_state_dict(untouched.state_dict());
    CHECK(second.state(0) == nullptr);
    CHECK(second.options().momentum() == 0.9);
    run(first, a, 0, 2);
    b = a;
    second.load_state_dict(first.state_dict());
    run(first, a, 2, 5);
    run(second, b, 2, 5);
    CHECK(bit_equal(a.w.value, b.w.value));
    CHECK(bit_equal(first.state(1)->momentum_buffer, second.state(1)->momentum_buffer));
  }
}

TEST_CASE_TEMPLATE("optim state: a schedule's state restores its epoch and each group's lr", T,
                   float, double) {
  Params<T> p;
  SGD<T> sgd({{{&p.w}, SGDOptions(0.4)}, {{&p.b}, SGDOptions(0.1)}});
  WarmupCosineLR<T> schedule(sgd, 2, 10, 0.25, 0.01);
  for (int s = 0; s < 5; ++s) schedule.step();
  const StateDict<T> s = schedule.state_dict();
  CHECK(s.strings.at("type") == "WarmupCosineLR");
  CHECK(s.integers.at("last_epoch") == 5);
  CHECK(s.integers.at("param_groups") == 2);
  CHECK(s.reals.at("base_lrs.0") == 0.4);
  CHECK(s.reals.at("base_lrs.1") == 0.1);
  CHECK(s.reals.at("last_lrs.1") == sgd.lr(1));

  Params<T> q;
  SGD<T> other({{{&q.w}, SGDOptions(1.0)}, {{&q.b}, SGDOptions(2.0)}});
  WarmupCosineLR<T> resumed(other, 2, 10, 0.25, 0.01);
  resumed.load_state_dict(s);
  CHECK(resumed.last_epoch() == 5);
  CHECK(resumed.base_lrs() == std::vector<double>{0.4, 0.1});
  CHECK(other.lr(0) == sgd.lr(0));  // the loaded schedule sets the optimizer's lrs
  CHECK(other.lr(1) == sgd.lr(1));
  schedule.step();
  resumed.step();
  CHECK(other.lr(0) == sgd.lr(0));
  CHECK(other.lr(1) == sgd.lr(1));
}
