// Tests of optim/: SGD, Adam, AdamW, clip_grad_norm and the learning-rate
// schedules. Expected values come from hand arithmetic or from scalar
// re-derivations of the published update rules written out below in plain
// double arithmetic; none of them calls the code under test.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include <xtensor/xarray.hpp>

#include <xtgrad/optim/optim.hpp>

#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::optim;
using xtgrad::testing::check_close;

namespace {

using Values = std::vector<double>;

template <class T>
double rtol() {
  return std::is_same_v<T, float> ? 2e-6 : 1e-12;
}
template <class T>
double atol() {
  return std::is_same_v<T, float> ? 1e-6 : 1e-14;
}

template <class T>
xt::xarray<T> make(const Values& values, const std::vector<std::size_t>& shape) {
  xt::xarray<T> a = xt::empty<T>(shape);
  REQUIRE(a.size() == values.size());
  for (std::size_t i = 0; i < values.size(); ++i) a.data()[i] = static_cast<T>(values[i]);
  return a;
}

template <class T>
Values as_values(const xt::xarray<T>& a) {
  return Values(a.begin(), a.end());
}

xt::xarray<double> as_array(const Values& v, const std::vector<std::size_t>& shape) {
  return make<double>(v, shape);
}

template <class T>
void set_grad(Parameter<T>& p, const Values& g) {
  p.grad = make<T>(g, {p.value.shape().begin(), p.value.shape().end()});
  p.has_grad = true;
}

const std::vector<std::size_t> k_shape = {2, 2};
const Values k_p0 = {1.0, -2.0, 0.5, 3.0};
// Changing gradients for three steps. Element 2 shrinks after step 1, so that
// exp_avg_sq falls and AMSGrad's running maximum differs from it.
const std::vector<Values> k_grads = {
    {0.5, -1.0, 2.0, 0.0}, {0.25, 0.5, -0.05, 0.3}, {-0.75, 0.1, 0.01, -0.2}};

// torch.optim.SGD, one scalar at a time.
struct SgdReference {
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
  Values p, buf;
  bool has_buf = false;

  void step(const Values& grad) {
    if (momentum != 0.0 && !has_buf) buf.assign(p.size(), 0.0);
    for (std::size_t j = 0; j < p.size(); ++j) {
      double d = grad[j];
      if (weight_decay != 0.0) d = d + weight_decay * p[j];
      if (momentum != 0.0) {
        if (!has_buf)
          buf[j] = d;  // first step: a copy of the gradient, no dampening
        else
          buf[j] = momentum * buf[j] + (1.0 - dampening) * d;
        d = nesterov ? d + momentum * buf[j] : buf[j];
      }
      p[j] = p[j] - lr * d;
    }
    if (momentum != 0.0) has_buf = true;
  }
};

// Adam as written in Kingma & Ba (Algorithm 1, bias-corrected m_hat and v_hat),
// with PyTorch's L2 weight decay, AMSGrad's running maximum, and AdamW's
// decoupled decay (Loshchilov & Hutter, Algorithm 2).
struct AdamReference {
  double lr, beta1, beta2, eps, weight_decay;
  bool amsgrad, decoupled;
  Values p, m, v, v_max;
  int t = 0;

  void step(const Values& grad) {
    if (t == 0) m = v = v_max = Values(p.size(), 0.0);
    ++t;
    for (std::size_t j = 0; j < p.size(); ++j) {
      double g = grad[j];
      if (decoupled)
        p[j] = p[j] - lr * weight_decay * p[j];
      else
        g = g + weight_decay * p[j];
      m[j] = beta1 * m[j] + (1.0 - beta1) * g;
      v[j] = beta2 * v[j] + (1.0 - beta2) * g * g;
      if (v[j] > v_max[j]) v_max[j] = v[j];
      const double m_hat = m[j] / (1.0 - std::pow(beta1, t));
      const double v_hat = (amsgrad ? v_max[j] : v[j]) / (1.0 - std::pow(beta2, t));
      p[j] = p[j] - lr * m_hat / (std::sqrt(v_hat) + eps);
    }
  }
};

// Runs the optimizer and the reference over `grads` (rounded to T, so both see
// the same inputs) and compares the value after every step.
template <class T, class Reference>
void check_three_steps(Optimizer<T>& optimizer, Parameter<T>& p, Reference& reference,
                       const std::vector<Values>& grads = k_grads) {
  const std::vector<std::size_t> shape(p.value.shape().begin(), p.value.shape().end());
  reference.p = as_values(p.value);
  for (std::size_t s = 0; s < grads.size(); ++s) {
    CAPTURE(s);
    set_grad(p, grads[s]);
    reference.step(as_values(p.grad));
    optimizer.step();
    check_close(p.value, as_array(reference.p, shape), rtol<T>(), atol<T>());
  }
}

template <class T>
Values run_adam(double weight_decay, bool amsgrad, bool decoupled, double beta2 = 0.999) {
  Parameter<T> p("w", make<T>(k_p0, k_shape));
  Adam<T> adam({&p},
               AdamOptions(0.1).betas({0.9, beta2}).weight_decay(weight_decay).amsgrad(amsgrad));
  AdamW<T> adamw({&p},
                 AdamWOptions(0.1).betas({0.9, beta2}).weight_decay(weight_decay).amsgrad(amsgrad));
  Optimizer<T>& optimizer = decoupled ? static_cast<Optimizer<T>&>(adamw) : adam;
  for (const Values& g : k_grads) {
    set_grad(p, g);
    optimizer.step();
  }
  return as_values(p.value);
}

double max_abs_difference(const Values& a, const Values& b) {
  double worst = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

}  // namespace

// ---------------------------------------------------------------- options

TEST_CASE("optim: options keep PyTorch's defaults and chain") {
  const SGDOptions sgd;
  CHECK(sgd.lr() == 1e-3);
  CHECK(sgd.momentum() == 0.0);
  CHECK(sgd.dampening() == 0.0);
  CHECK(sgd.weight_decay() == 0.0);
  CHECK_FALSE(sgd.nesterov());
  const SGDOptions chained = SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(1e-4);
  CHECK(chained.lr() == 0.1);
  CHECK(chained.momentum() == 0.9);
  CHECK(chained.nesterov());
  CHECK(chained.weight_decay() == 1e-4);

  const AdamOptions adam;
  CHECK(adam.lr() == 1e-3);
  CHECK(std::get<0>(adam.betas()) == 0.9);
  CHECK(std::get<1>(adam.betas()) == 0.999);
  CHECK(adam.eps() == 1e-8);
  CHECK(adam.weight_decay() == 0.0);
  CHECK_FALSE(adam.amsgrad());
  const AdamOptions adam_chained = AdamOptions(3e-4).betas({0.8, 0.95}).amsgrad(true);
  CHECK(std::get<0>(adam_chained.betas()) == 0.8);
  CHECK(std::get<1>(adam_chained.betas()) == 0.95);
  CHECK(adam_chained.amsgrad());

  const AdamWOptions adamw;
  CHECK(adamw.lr() == 1e-3);
  CHECK(std::get<0>(adamw.betas()) == 0.9);
  CHECK(std::get<1>(adamw.betas()) == 0.999);
  CHECK(adamw.eps() == 1e-8);
  CHECK(adamw.weight_decay() == 1e-2);
  CHECK_FALSE(adamw.amsgrad());
}

TEST_CASE_TEMPLATE("optim: options() reports the current learning rate", T, float, double) {
  Parameter<T> p("w", make<T>({1.0}, {1}));
  SGD<T> sgd({&p}, SGDOptions(0.1).momentum(0.5));
  Adam<T> adam({&p}, AdamOptions(0.2));
  AdamW<T> adamw({&p}, AdamWOptions(0.3));
  sgd.set_lr(0.01);
  adam.set_lr(0.02);
  adamw.set_lr(0.03);
  CHECK(sgd.lr() == 0.01);
  CHECK(sgd.options().lr() == 0.01);
  CHECK(sgd.options().momentum() == 0.5);
  CHECK(adam.options().lr() == 0.02);
  CHECK(adamw.options().lr() == 0.03);
  CHECK(adamw.options().weight_decay() == 1e-2);
}

// ---------------------------------------------------------------- SGD

TEST_CASE_TEMPLATE("sgd: hand-computed steps", T, float, double) {
  SUBCASE("plain: p - lr * g") {
    Parameter<T> p("w", make<T>({1.0, -2.0}, {2}));
    SGD<T> sgd({&p}, SGDOptions(0.1));
    set_grad(p, {0.5, 1.0});
    sgd.step();
    check_close(p.value, xt::xarray<double>{0.95, -2.1}, rtol<T>(), atol<T>());
  }
  SUBCASE("momentum: no dampening on the first step") {
    // buf1 = 1 -> p = 1 - 0.1 = 0.9; buf2 = 0.9 * 1 + 0.5 * 1 = 1.4 -> p = 0.9 - 0.14 = 0.76
    Parameter<T> p("w", make<T>({1.0}, {1}));
    SGD<T> sgd({&p}, SGDOptions(0.1).momentum(0.9).dampening(0.5));
    set_grad(p, {1.0});
    sgd.step();
    check_close(p.value, xt::xarray<double>{0.9}, rtol<T>(), atol<T>());
    CHECK(sgd.state(0)->momentum_buffer(0) == T(1));
    sgd.step();
    check_close(p.value, xt::xarray<double>{0.76}, rtol<T>(), atol<T>());
    check_close(sgd.state(0)->momentum_buffer, xt::xarray<double>{1.4}, rtol<T>(), atol<T>());
  }
  SUBCASE("nesterov: g + momentum * buf") {
    // buf1 = 1, d = 1 + 0.9 = 1.9 -> p = 0.81; buf2 = 1.9, d = 1 + 1.71 = 2.71 -> p = 0.539
    Parameter<T> p("w", make<T>({1.0}, {1}));
    SGD<T> sgd({&p}, SGDOptions(0.1).momentum(0.9).nesterov(true));
    set_grad(p, {1.0});
    sgd.step();
    check_close(p.value, xt::xarray<double>{0.81}, rtol<T>(), atol<T>());
    sgd.step();
    check_close(p.value, xt::xarray<double>{0.539}, rtol<T>(), atol<T>());
  }
  SUBCASE("weight decay: g + weight_decay * p") {
    // d = 0 + 0.5 * 2 = 1 -> p = 2 - 0.1 = 1.9
    Parameter<T> p("w", make<T>({2.0}, {1}));
    SGD<T> sgd({&p}, SGDOptions(0.1).weight_decay(0.5));
    set_grad(p, {0.0});
    sgd.step();
    check_close(p.value, xt::xarray<double>{1.9}, rtol<T>(), atol<T>());
    CHECK(sgd.state(0) == nullptr);  // no momentum, no state
  }
}

TEST_CASE_TEMPLATE("sgd: first three steps match torch.optim.SGD's rule", T, float, double) {
  struct Config {
    const char* name;
    double lr, momentum, dampening, weight_decay;
    bool nesterov;
  };
  const std::vector<Config> configs = {
      {"plain", 0.1, 0.0, 0.0, 0.0, false},
      {"momentum", 0.1, 0.9, 0.0, 0.0, false},
      {"momentum + dampening", 0.1, 0.9, 0.3, 0.0, false},
      {"nesterov", 0.1, 0.9, 0.0, 0.0, true},
      {"weight decay", 0.1, 0.0, 0.0, 0.1, false},
      {"momentum + weight decay", 0.05, 0.8, 0.1, 0.05, false},
      {"nesterov + weight decay", 0.05, 0.8, 0.0, 0.05, true},
  };
  for (const Config& c : configs) {
    CAPTURE(c.name);
    Parameter<T> p("w", make<T>(k_p0, k_shape));
    SGD<T> sgd({&p}, SGDOptions(c.lr)
                         .momentum(c.momentum)
                         .dampening(c.dampening)
                         .weight_decay(c.weight_decay)
                         .nesterov(c.nesterov));
    SgdReference reference{c.lr, c.momentum, c.dampening, c.weight_decay, c.nesterov, {}, {}};
    check_three_steps(sgd, p, reference);
    if (c.momentum != 0.0)
      check_close(sgd.state(0)->momentum_buffer, as_array(reference.buf, k_shape), rtol<T>(),
                  atol<T>());
  }
}

// ---------------------------------------------------------------- Adam, AdamW

TEST_CASE_TEMPLATE("adam: the first step moves each element by lr against its gradient", T, float,
                   double) {
  // t = 1: m_hat = g, v_hat = g^2, so p1 = p - lr * g / (|g| + eps).
  const double lr = 0.1, eps = 1e-8;
  Parameter<T> p("w", make<T>({1.0, -2.0, 0.5}, {3}));
  Adam<T> adam({&p}, AdamOptions(lr).eps(eps));
  set_grad(p, {0.5, -3.0, 0.0});
  adam.step();
  const xt::xarray<double> expected = {1.0 - lr * 0.5 / (0.5 + eps), -2.0 + lr * 3.0 / (3.0 + eps),
                                       0.5};
  check_close(p.value, expected, rtol<T>(), atol<T>());
  REQUIRE(adam.state(0) != nullptr);
  CHECK(adam.state(0)->step == 1);
  check_close(adam.state(0)->exp_avg, xt::xarray<double>{0.05, -0.3, 0.0}, rtol<T>(), atol<T>());
  check_close(adam.state(0)->exp_avg_sq, xt::xarray<double>{0.00025, 0.009, 0.0}, rtol<T>(),
              atol<T>());
  CHECK(adam.state(0)->max_exp_avg_sq.dimension() == 0);  // never shaped without amsgrad
}

TEST_CASE_TEMPLATE("adam: first three steps match torch.optim.Adam's rule", T, float, double) {
  struct Config {
    const char* name;
    double lr, beta1, beta2, eps, weight_decay;
    bool amsgrad;
  };
  const std::vector<Config> configs = {
      {"defaults", 0.1, 0.9, 0.999, 1e-8, 0.0, false},
      {"amsgrad", 0.1, 0.9, 0.999, 1e-8, 0.0, true},
      {"weight decay", 0.1, 0.9, 0.999, 1e-8, 0.1, false},
      {"amsgrad + weight decay, other betas and eps", 0.05, 0.8, 0.99, 1e-3, 0.2, true},
      {"beta1 = 0 (RMSProp-like)", 0.1, 0.0, 0.9, 1e-8, 0.0, false},
  };
  for (const Config& c : configs) {
    CAPTURE(c.name);
    Parameter<T> p("w", make<T>(k_p0, k_shape));
    Adam<T> adam({&p}, AdamOptions(c.lr)
                           .betas({c.beta1, c.beta2})
                           .eps(c.eps)
                           .weight_decay(c.weight_decay)
                           .amsgrad(c.amsgrad));
    AdamReference reference{c.lr, c.beta1, c.beta2, c.eps, c.weight_decay, c.amsgrad, false, {},
                            {},   {},      {},      {}};
    check_three_steps(adam, p, reference);
    const AdamParamState<T>* state = adam.state(0);
    REQUIRE(state != nullptr);
    CHECK(state->step == 3);
    check_close(state->exp_avg, as_array(reference.m, k_shape), rtol<T>(), atol<T>());
    check_close(state->exp_avg_sq, as_array(reference.v, k_shape), rtol<T>(), atol<T>());
    if (c.amsgrad)
      check_close(state->max_exp_avg_sq, as_array(reference.v_max, k_shape), rtol<T>(), atol<T>());
  }
}

TEST_CASE_TEMPLATE("adamw: first three steps match torch.optim.AdamW's rule", T, float, double) {
  struct Config {
    const char* name;
    double lr, weight_decay;
    bool amsgrad;
  };
  const std::vector<Config> configs = {
      {"default weight decay", 0.1, 1e-2, false},
      {"strong weight decay", 0.1, 0.5, false},
      {"amsgrad", 0.05, 0.1, true},
  };
  for (const Config& c : configs) {
    CAPTURE(c.name);
    Parameter<T> p("w", make<T>(k_p0, k_shape));
    AdamW<T> adamw({&p}, AdamWOptions(c.lr).weight_decay(c.weight_decay).amsgrad(c.amsgrad));
    AdamReference reference{c.lr, 0.9, 0.999, 1e-8, c.weight_decay, c.amsgrad, true, {},
                            {},   {},  {},    {}};
    check_three_steps(adamw, p, reference);
    CHECK(adamw.state(0)->step == 3);
    check_close(adamw.state(0)->exp_avg, as_array(reference.m, k_shape), rtol<T>(), atol<T>());
  }
}

TEST_CASE_TEMPLATE("adam: amsgrad changes the update when exp_avg_sq falls", T, float, double) {
  // Guards the amsgrad reference test above against passing vacuously: the
  // difference is far above its tolerance (about 1e-6 in float).
  const Values plain = run_adam<T>(0.0, false, false);
  const Values amsgrad = run_adam<T>(0.0, true, false);
  CHECK(std::abs(plain[2] - amsgrad[2]) > 2e-5);
  CHECK(plain[0] == amsgrad[0]);  // its exp_avg_sq only grew: same update
  // With a shorter memory (beta2 = 0.9) exp_avg_sq falls by 10%.
  const Values plain_short = run_adam<T>(0.0, false, false, 0.9);
  const Values amsgrad_short = run_adam<T>(0.0, true, false, 0.9);
  CHECK(std::abs(plain_short[2] - amsgrad_short[2]) > 1e-3);
}

TEST_CASE_TEMPLATE("adamw: differs from adam with weight decay, equals it without", T, float,
                   double) {
  CHECK(run_adam<T>(0.0, false, false) == run_adam<T>(0.0, false, true));
  CHECK(run_adam<T>(0.0, true, false) == run_adam<T>(0.0, true, true));
  CHECK(max_abs_difference(run_adam<T>(0.1, false, false), run_adam<T>(0.1, false, true)) > 1e-3);
}

// ---------------------------------------------------------------- all optimizers

TEST_CASE_TEMPLATE("optim: long parameters (whole SIMD batches and a tail) match the rules", T,
                   float, double) {
  // 67 elements: several batches of every vector width, plus a remainder.
  const std::vector<std::size_t> shape = {67};
  const Values p0 = as_values(xtgrad::testing::random_array<double>(shape, 1, -2.0, 2.0));
  std::vector<Values> grads;
  for (std::uint32_t s = 0; s < 3; ++s)
    grads.push_back(as_values(xtgrad::testing::random_array<double>(shape, 10 + s, -1.0, 1.0)));
  // Shrink some gradients after the first step so that AMSGrad's maximum matters.
  for (std::size_t j = 0; j < shape[0]; j += 3) grads[1][j] *= 0.01, grads[2][j] *= 0.01;
  SUBCASE("sgd") {
    Parameter<T> p("w", make<T>(p0, shape));
    SGD<T> sgd({&p}, SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(0.05));
    SgdReference reference{0.1, 0.9, 0.0, 0.05, true, {}, {}};
    check_three_steps(sgd, p, reference, grads);
  }
  SUBCASE("adam") {
    Parameter<T> p("w", make<T>(p0, shape));
    Adam<T> adam({&p}, AdamOptions(0.1).betas({0.9, 0.9}).weight_decay(0.1).amsgrad(true));
    AdamReference reference{0.1, 0.9, 0.9, 1e-8, 0.1, true, false, {}, {}, {}, {}, {}};
    check_three_steps(adam, p, reference, grads);
    check_close(adam.state(0)->max_exp_avg_sq, as_array(reference.v_max, shape), rtol<T>(),
                atol<T>());
    CHECK(reference.v_max != reference.v);  // amsgrad did change something
  }
  SUBCASE("adamw") {
    Parameter<T> p("w", make<T>(p0, shape));
    AdamW<T> adamw({&p}, AdamWOptions(0.1).weight_decay(0.2));
    AdamReference reference{0.1, 0.9, 0.999, 1e-8, 0.2, false, true, {}, {}, {}, {}, {}};
    check_three_steps(adamw, p, reference, grads);
  }
}

TEST_CASE_TEMPLATE("optim: every optimizer converges on a quadratic bowl", T, float, double) {
  // loss = sum (p - c)^2, gradient 2 (p - c) set by hand each step.
  const Values c = {0.3, -0.7, 1.2, -0.4};
  struct Run {
    const char* name;
    std::function<std::unique_ptr<Optimizer<T>>(Parameter<T>*)> make_optimizer;
    int steps;
  };
  const std::vector<Run> runs = {
      {"sgd", [](Parameter<T>* p) { return std::make_unique<SGD<T>>(std::vector{p}, 0.1); }, 200},
      {"sgd momentum",
       [](Parameter<T>* p) {
         return std::make_unique<SGD<T>>(std::vector{p}, SGDOptions(0.05).momentum(0.9));
       },
       400},
      {"sgd nesterov",
       [](Parameter<T>* p) {
         return std::make_unique<SGD<T>>(std::vector{p},
                                         SGDOptions(0.05).momentum(0.9).nesterov(true));
       },
       400},
      {"adam", [](Parameter<T>* p) { return std::make_unique<Adam<T>>(std::vector{p}, 0.05); },
       2000},
      {"adam amsgrad",
       [](Parameter<T>* p) {
         return std::make_unique<Adam<T>>(std::vector{p}, AdamOptions(0.05).amsgrad(true));
       },
       2000},
      {"adamw",
       [](Parameter<T>* p) {
         return std::make_unique<AdamW<T>>(std::vector{p}, AdamWOptions(0.05).weight_decay(1e-4));
       },
       2000},
  };
  for (const Run& run : runs) {
    CAPTURE(run.name);
    Parameter<T> p("w", make<T>(k_p0, k_shape));
    std::unique_ptr<Optimizer<T>> optimizer = run.make_optimizer(&p);
    for (int s = 0; s < run.steps; ++s) {
      optimizer->zero_grad();
      Values g(c.size());
      for (std::size_t j = 0; j < c.size(); ++j) g[j] = 2.0 * (double(p.value.data()[j]) - c[j]);
      set_grad(p, g);
      optimizer->step();
    }
    check_close(p.value, as_array(c, k_shape), 0.0, 1e-3);
  }
}

TEST_CASE_TEMPLATE("optim: parameters without a gradient are untouched", T, float, double) {
  struct Run {
    const char* name;
    std::function<std::unique_ptr<Optimizer<T>>(std::vector<Parameter<T>*>)> make_optimizer;
  };
  const std::vector<Run> runs = {
      {"sgd",
       [](std::vector<Parameter<T>*> ps) {
         return std::make_unique<SGD<T>>(ps, SGDOptions(0.1).momentum(0.9).weight_decay(0.1));
       }},
      {"adam",
       [](std::vector<Parameter<T>*> ps) {
         return std::make_unique<Adam<T>>(ps, AdamOptions(0.1).weight_decay(0.1));
       }},
      {"adamw",
       [](std::vector<Parameter<T>*> ps) {
         return std::make_unique<AdamW<T>>(ps, AdamWOptions(0.1).weight_decay(0.1));
       }},
  };
  for (const Run& run : runs) {
    CAPTURE(run.name);
    Parameter<T> a("a", make<T>({1.0, 2.0}, {2}));
    Parameter<T> b("b", make<T>({3.0, -4.0}, {2}));
    std::unique_ptr<Optimizer<T>> optimizer = run.make_optimizer({&a, &b});
    set_grad(a, {0.5, -0.5});
    // A stale gradient without has_grad: an optimizer that ignored the flag
    // (or applied weight decay anyway) would move b.
    b.grad = make<T>({10.0, 10.0}, {2});
    b.has_grad = false;
    const xt::xarray<T> a_before = a.value, b_before = b.value;
    optimizer->step();
    CHECK(a.value != a_before);
    CHECK(b.value == b_before);
    CHECK(b.grad == make<T>({10.0, 10.0}, {2}));
    if (auto* sgd = dynamic_cast<SGD<T>*>(optimizer.get())) {
      CHECK(sgd->state(0) != nullptr);
      CHECK(sgd->state(1) == nullptr);
    }
    if (auto* adam = dynamic_cast<Adam<T>*>(optimizer.get())) {
      CHECK(adam->state(1) == nullptr);
      set_grad(b, {1.0, 1.0});
      optimizer->step();
      CHECK(adam->state(0)->step == 2);
      CHECK(adam->state(1)->step == 1);  // steps are counted per parameter
    }
    if (auto* adamw = dynamic_cast<AdamW<T>*>(optimizer.get())) CHECK(adamw->state(1) == nullptr);
  }
}

TEST_CASE_TEMPLATE("optim: zero_grad forgets every gradient", T, float, double) {
  Parameter<T> a("a", make<T>({1.0, 2.0}, {2}));
  Parameter<T> b("b", make<T>({3.0}, {1}));
  Adam<T> adam({&a, &b});
  set_grad(a, {0.5, -0.5});
  set_grad(b, {2.0});
  adam.zero_grad();
  CHECK_FALSE(a.has_grad);
  CHECK_FALSE(b.has_grad);
  CHECK(a.grad == xt::zeros<T>({2}));
  CHECK(b.grad == xt::zeros<T>({1}));
  const xt::xarray<T> before = a.value;
  adam.step();
  CHECK(a.value == before);
  CHECK(adam.state(0) == nullptr);
}

TEST_CASE_TEMPLATE("optim: empty parameters and shape errors", T, float, double) {
  SUBCASE("a [0, 3] parameter steps without touching memory") {
    Parameter<T> p("empty", xt::xarray<T>::from_shape({0, 3}));
    Adam<T> adam({&p}, AdamOptions(0.1).amsgrad(true));
    p.has_grad = true;
    adam.step();
    CHECK(adam.state(0)->exp_avg.shape() == p.value.shape());
  }
  SUBCASE("a gradient of the wrong shape") {
    Parameter<T> p("w", make<T>(k_p0, k_shape));
    SGD<T> sgd({&p}, 0.1);
    p.grad = xt::zeros<T>({3});
    p.has_grad = true;
    CHECK_THROWS_WITH_PARTS(sgd.step(), std::invalid_argument,
                            {"SGD::step", "parameter 0", "'w'", "[3]", "[2, 2]"});
    CHECK_THROWS_WITH_PARTS(clip_grad_norm<T>({&p}, 1.0), std::invalid_argument,
                            {"clip_grad_norm", "'w'", "[3]", "[2, 2]"});
  }
  SUBCASE("a parameter that changed shape after its state was created") {
    Parameter<T> p("w", make<T>(k_p0, k_shape));
    AdamW<T> adamw({&p});
    set_grad(p, k_grads[0]);
    adamw.step();
    p.value = xt::zeros<T>({3});
    p.grad = xt::ones<T>({3});
    CHECK_THROWS_WITH_PARTS(adamw.step(), std::logic_error,
                            {"AdamW::step", "'w'", "[3]", "[2, 2]"});
  }
}

// ---------------------------------------------------------------- errors

TEST_CASE_TEMPLATE("optim: invalid hyperparameters throw naming class, argument and value", T,
                   float, double) {
  Parameter<T> p("w", make<T>({1.0}, {1}));
  const std::vector<Parameter<T>*> ps = {&p};
  const double nan = std::numeric_limits<double>::quiet_NaN();

  CHECK_THROWS_WITH_PARTS(SGD<T>(ps, -0.1), std::invalid_argument, {"SGD", "'lr'", "-0.1"});
  CHECK_THROWS_WITH_PARTS(SGD<T>(ps, nan), std::invalid_argument, {"SGD", "'lr'", "nan"});
  CHECK_THROWS_WITH_PARTS(SGD<T>(ps, SGDOptions(0.1).momentum(-0.5)), std::invalid_argument,
                          {"SGD", "'momentum'", "-0.5"});
  CHECK_THROWS_WITH_PARTS(SGD<T>(ps, SGDOptions(0.1).dampening(1.5)), std::invalid_argument,
                          {"SGD", "'dampening'", "1.5"});
  CHECK_THROWS_WITH_PARTS(SGD<T>(ps, SGDOptions(0.1).weight_decay(-0.01)), std::invalid_argument,
                          {"SGD", "'weight_decay'", "-0.01"});
  CHECK_THROWS_WITH_PARTS(SGD<T>(ps, SGDOptions(0.1).nesterov(true)), std::invalid_argument,
                          {"SGD", "'nesterov'", "momentum 0"});
  CHECK_THROWS_WITH_PARTS(SGD<T>(ps, SGDOptions(0.1).nesterov(true).momentum(0.9).dampening(0.1)),
                          std::invalid_argument, {"SGD", "'nesterov'", "dampening 0.1"});
  CHECK_NOTHROW(SGD<T>(ps, SGDOptions(0.0).momentum(0.0).dampening(1.0)));

  CHECK_THROWS_WITH_PARTS(Adam<T>(ps, -1.0), std::invalid_argument, {"Adam", "'lr'", "-1"});
  CHECK_THROWS_WITH_PARTS(Adam<T>(ps, AdamOptions().betas({1.0, 0.999})), std::invalid_argument,
                          {"Adam", "'betas[0]'", "got 1"});
  CHECK_THROWS_WITH_PARTS(Adam<T>(ps, AdamOptions().betas({-0.1, 0.999})), std::invalid_argument,
                          {"Adam", "'betas[0]'", "-0.1"});
  CHECK_THROWS_WITH_PARTS(Adam<T>(ps, AdamOptions().betas({0.9, 1.0})), std::invalid_argument,
                          {"Adam", "'betas[1]'", "got 1"});
  CHECK_THROWS_WITH_PARTS(Adam<T>(ps, AdamOptions().eps(0.0)), std::invalid_argument,
                          {"Adam", "'eps'", "got 0"});
  CHECK_THROWS_WITH_PARTS(Adam<T>(ps, AdamOptions().eps(-1e-8)), std::invalid_argument,
                          {"Adam", "'eps'", "-1e-08"});
  CHECK_THROWS_WITH_PARTS(Adam<T>(ps, AdamOptions().weight_decay(-0.1)), std::invalid_argument,
                          {"Adam", "'weight_decay'", "-0.1"});
  CHECK_NOTHROW(Adam<T>(ps, AdamOptions(0.0).betas({0.0, 0.0})));

  CHECK_THROWS_WITH_PARTS(AdamW<T>(ps, -1.0), std::invalid_argument, {"AdamW", "'lr'", "-1"});
  CHECK_THROWS_WITH_PARTS(AdamW<T>(ps, AdamWOptions().betas({0.9, 1.5})), std::invalid_argument,
                          {"AdamW", "'betas[1]'", "1.5"});
  CHECK_THROWS_WITH_PARTS(AdamW<T>(ps, AdamWOptions().betas({nan, 0.9})), std::invalid_argument,
                          {"AdamW", "'betas[0]'", "nan"});
  CHECK_THROWS_WITH_PARTS(AdamW<T>(ps, AdamWOptions().eps(0.0)), std::invalid_argument,
                          {"AdamW", "'eps'", "got 0"});
  CHECK_THROWS_WITH_PARTS(AdamW<T>(ps, AdamWOptions().weight_decay(-0.01)), std::invalid_argument,
                          {"AdamW", "'weight_decay'", "-0.01"});
}

TEST_CASE_TEMPLATE("optim: invalid parameter lists and learning rates throw", T, float, double) {
  Parameter<T> p("w", make<T>({1.0}, {1}));
  CHECK_THROWS_WITH_PARTS(SGD<T>({}, 0.1), std::invalid_argument, {"SGD", "'params'", "empty"});
  CHECK_THROWS_WITH_PARTS(Adam<T>({&p, nullptr}), std::invalid_argument,
                          {"Adam", "'params'", "null pointer at position 1"});
  CHECK_THROWS_WITH_PARTS(AdamW<T>({&p, &p}), std::invalid_argument,
                          {"AdamW", "'params'", "'w' twice", "positions 0 and 1"});
  SGD<T> sgd({&p}, 0.1);
  CHECK_THROWS_WITH_PARTS(sgd.set_lr(-1.0), std::invalid_argument, {"SGD::set_lr", "'lr'", "-1"});
  CHECK_THROWS_WITH_PARTS(sgd.set_lr(std::numeric_limits<double>::infinity()),
                          std::invalid_argument, {"SGD::set_lr", "'lr'", "inf"});
  CHECK(sgd.lr() == 0.1);
}

// ---------------------------------------------------------------- clip_grad_norm

TEST_CASE_TEMPLATE("clip_grad_norm: returns the total norm and scales above max_norm", T, float,
                   double) {
  Parameter<T> a("a", make<T>({0.0}, {1}));
  Parameter<T> b("b", make<T>({0.0}, {1}));
  Parameter<T> c("c", make<T>({0.0}, {1}));
  const std::vector<Parameter<T>*> ps = {&a, &b, &c};
  auto reset = [&] {
    set_grad(a, {3.0});
    set_grad(b, {4.0});
    c.grad = make<T>({100.0}, {1});  // no has_grad: neither counted nor scaled
    c.has_grad = false;
  };

  SUBCASE("above max_norm: scaled by max_norm / (total + 1e-6)") {
    reset();
    CHECK(clip_grad_norm(ps, 1.0) == 5.0);  // sqrt(3^2 + 4^2)
    const double coef = 1.0 / (5.0 + 1e-6);
    check_close(a.grad, xt::xarray<double>{3.0 * coef}, rtol<T>(), 0.0);
    check_close(b.grad, xt::xarray<double>{4.0 * coef}, rtol<T>(), 0.0);
    CHECK(c.grad(0) == T(100));
    // The clipped gradients now have norm max_norm (up to the 1e-6).
    CHECK(clip_grad_norm(ps, 10.0) == doctest::Approx(1.0).epsilon(1e-6));
  }
  SUBCASE("below max_norm: nothing changes") {
    reset();
    CHECK(clip_grad_norm(ps, 10.0) == 5.0);
    CHECK(a.grad(0) == T(3));
    CHECK(b.grad(0) == T(4));
  }
  SUBCASE("at max_norm the 1e-6 still clips, as in PyTorch") {
    reset();
    CHECK(clip_grad_norm(ps, 5.0) == 5.0);
    check_close(a.grad, xt::xarray<double>{3.0 * 5.0 / (5.0 + 1e-6)}, rtol<T>(), 0.0);
    CHECK(a.grad(0) < T(3));
  }
  SUBCASE("other norms") {
    reset();
    set_grad(a, {3.0});
    a.value = make<T>({0.0, 0.0}, {2});
    set_grad(a, {3.0, -7.0});
    CHECK(clip_grad_norm(ps, 100.0, 1.0) == 14.0);             // 3 + 7 + 4
    CHECK(clip_grad_norm(ps, 100.0, k_infinity_norm) == 7.0);  // max |g|
    CHECK(clip_grad_norm(ps, 100.0, 3.0) == doctest::Approx(std::cbrt(27.0 + 343.0 + 64.0)));
    CHECK(clip_grad_norm(ps, 3.5, k_infinity_norm) == 7.0);
    const double coef = 3.5 / (7.0 + 1e-6);
    check_close(a.grad, xt::xarray<double>{3.0 * coef, -7.0 * coef}, rtol<T>(), 0.0);
    check_close(b.grad, xt::xarray<double>{4.0 * coef}, rtol<T>(), 0.0);
  }
  SUBCASE("no gradient at all: norm 0") {
    a.has_grad = b.has_grad = c.has_grad = false;
    CHECK(clip_grad_norm(ps, 1.0) == 0.0);
  }
  SUBCASE("a NaN gradient: NaN returned, gradients left for the caller") {
    reset();
    b.grad(0) = std::numeric_limits<T>::quiet_NaN();
    CHECK(std::isnan(clip_grad_norm(ps, 1.0)));
    CHECK(std::isnan(clip_grad_norm(ps, 1.0, k_infinity_norm)));
    CHECK(a.grad(0) == T(3));
  }
  SUBCASE("invalid arguments") {
    CHECK_THROWS_WITH_PARTS(clip_grad_norm(ps, -1.0), std::invalid_argument,
                            {"clip_grad_norm", "'max_norm'", "-1"});
    CHECK_THROWS_WITH_PARTS(clip_grad_norm(ps, 1.0, 0.0), std::invalid_argument,
                            {"clip_grad_norm", "'norm_type'", "got 0"});
    CHECK_THROWS_WITH_PARTS(clip_grad_norm<T>({&a, nullptr}, 1.0), std::invalid_argument,
                            {"clip_grad_norm", "'params'", "position 1"});
  }
}

// ---------------------------------------------------------------- schedules

namespace {

const double k_pi = std::acos(-1.0);

// Steps `schedule` to every t in [0, last] and compares the lr it sets with
// expected(t); also checks that the optimizer received it.
template <class T, class Schedule, class Expected>
void check_schedule(Optimizer<T>& optimizer, Schedule& schedule, std::int64_t last,
                    Expected expected) {
  for (std::int64_t t = 0; t <= last; ++t) {
    CAPTURE(t);
    if (t > 0) schedule.step();
    CHECK(schedule.last_epoch() == t);
    CHECK(schedule.last_lr() == doctest::Approx(expected(t)).epsilon(1e-12));
    CHECK(optimizer.lr() == schedule.last_lr());
    CHECK(schedule.lr_at(t) == schedule.last_lr());
  }
}

}  // namespace

TEST_CASE_TEMPLATE("lr_scheduler: StepLR", T, float, double) {
  Parameter<T> p("w", make<T>({1.0}, {1}));
  SGD<T> sgd({&p}, 0.1);
  StepLR schedule(sgd, 3, 0.5);  // class template argument deduction from SGD<T>
  static_assert(std::is_same_v<decltype(schedule), StepLR<T>>);
  CHECK(schedule.base_lr() == 0.1);
  const std::vector<double> hand = {0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025, 0.025, 0.0125};
  check_schedule(sgd, schedule, 9, [&](std::int64_t t) { return hand[t]; });
}

TEST_CASE_TEMPLATE("lr_scheduler: CosineAnnealingLR", T, float, double) {
  Parameter<T> p("w", make<T>({1.0}, {1}));
  SUBCASE("eta_min = 0, hand values") {
    Adam<T> adam({&p}, 0.1);
    CosineAnnealingLR<T> schedule(adam, 4);
    const double r = std::sqrt(0.5);  // cos(pi / 4)
    const std::vector<double> hand = {0.1,
                                      0.1 * (1 + r) / 2,
                                      0.05,
                                      0.1 * (1 - r) / 2,
                                      0.0,
                                      0.1 * (1 - r) / 2,  // past T_max the cosine continues
                                      0.05};
    for (std::int64_t t = 0; t <= 6; ++t) {
      CAPTURE(t);
      if (t > 0) schedule.step();
      CHECK(schedule.last_lr() == doctest::Approx(hand[t]).epsilon(1e-12));
      CHECK(adam.lr() == schedule.last_lr());
    }
  }
  SUBCASE("eta_min > 0, closed form") {
    SGD<T> sgd({&p}, 0.2);
    CosineAnnealingLR<T> schedule(sgd, 10, 0.01);
    check_schedule(sgd, schedule, 25, [](std::int64_t t) {
      return 0.01 + (0.2 - 0.01) * (1.0 + std::cos(k_pi * double(t) / 10.0)) / 2.0;
    });
    CHECK(schedule.lr_at(10) == doctest::Approx(0.01).epsilon(1e-12));
  }
}

TEST_CASE_TEMPLATE("lr_scheduler: LinearWarmup", T, float, double) {
  Parameter<T> p("w", make<T>({1.0}, {1}));
  AdamW<T> adamw({&p}, 0.1);
  LinearWarmup<T> schedule(adamw, 4, 0.25);
  const std::vector<double> hand = {0.025, 0.04375, 0.0625, 0.08125, 0.1, 0.1, 0.1, 0.1};
  check_schedule(adamw, schedule, 7, [&](std::int64_t t) { return hand[t]; });

  SGD<T> sgd({&p}, 0.5);
  LinearWarmup<T> none(sgd, 0, 0.0);
  CHECK(none.last_lr() == 0.5);  // no warm-up steps: constant
}

TEST_CASE_TEMPLATE("lr_scheduler: WarmupCosineLR", T, float, double) {
  Parameter<T> p("w", make<T>({1.0}, {1}));
  SGD<T> sgd({&p}, 0.1);
  WarmupCosineLR<T> schedule(sgd, 2, 4, 0.0, 0.01);
  const double r = std::sqrt(0.5);
  const std::vector<double> hand = {
      0.0,  0.05, 0.1, 0.01 + 0.09 * (1 + r) / 2, 0.055, 0.01 + 0.09 * (1 - r) / 2, 0.01,
      0.01, 0.01, 0.01};  // holds eta_min after the cosine
  check_schedule(sgd, schedule, 9, [&](std::int64_t t) { return hand[t]; });

  Adam<T> adam({&p}, 0.3);
  WarmupCosineLR<T> no_warmup(adam, 0, 8);
  check_schedule(adam, no_warmup, 8, [](std::int64_t t) {
    return 0.3 * (1.0 + std::cos(k_pi * double(t) / 8.0)) / 2.0;
  });
}

TEST_CASE_TEMPLATE("lr_scheduler: the optimizer steps with the scheduled lr", T, float, double) {
  Parameter<T> p("w", make<T>({1.0}, {1}));
  SGD<T> sgd({&p}, 0.1);
  LinearWarmup<T> schedule(sgd, 2, 0.5);
  double expected = 1.0;
  for (int s = 0; s < 4; ++s) {
    set_grad(p, {1.0});
    expected -= schedule.last_lr();  // lr * g with g = 1: 0.05, 0.075, 0.1, 0.1
    sgd.step();
    schedule.step();
    check_close(p.value, xt::xarray<double>{expected}, rtol<T>(), atol<T>());
  }
  CHECK(expected == doctest::Approx(1.0 - 0.05 - 0.075 - 0.1 - 0.1));
}

TEST_CASE_TEMPLATE("lr_scheduler: invalid arguments throw naming schedule, argument, value", T,
                   float, double) {
  Parameter<T> p("w", make<T>({1.0}, {1}));
  SGD<T> sgd({&p}, 0.1);
  CHECK_THROWS_WITH_PARTS(StepLR<T>(sgd, 0), std::invalid_argument,
                          {"StepLR", "'step_size'", "got 0"});
  CHECK_THROWS_WITH_PARTS(StepLR<T>(sgd, 2, 0.0), std::invalid_argument,
                          {"StepLR", "'gamma'", "got 0"});
  CHECK_THROWS_WITH_PARTS(StepLR<T>(sgd, 2, -0.5), std::invalid_argument,
                          {"StepLR", "'gamma'", "-0.5"});
  CHECK_THROWS_WITH_PARTS(CosineAnnealingLR<T>(sgd, 0), std::invalid_argument,
                          {"CosineAnnealingLR", "'T_max'", "got 0"});
  CHECK_THROWS_WITH_PARTS(CosineAnnealingLR<T>(sgd, 10, -0.1), std::invalid_argument,
                          {"CosineAnnealingLR", "'eta_min'", "-0.1"});
  CHECK_THROWS_WITH_PARTS(LinearWarmup<T>(sgd, -1, 0.5), std::invalid_argument,
                          {"LinearWarmup", "'warmup_steps'", "-1"});
  CHECK_THROWS_WITH_PARTS(LinearWarmup<T>(sgd, 5, 1.5), std::invalid_argument,
                          {"LinearWarmup", "'start_factor'", "1.5"});
  CHECK_THROWS_WITH_PARTS(LinearWarmup<T>(sgd, 5, -0.1), std::invalid_argument,
                          {"LinearWarmup", "'start_factor'", "-0.1"});
  CHECK_THROWS_WITH_PARTS(WarmupCosineLR<T>(sgd, -2, 10), std::invalid_argument,
                          {"WarmupCosineLR", "'warmup_steps'", "-2"});
  CHECK_THROWS_WITH_PARTS(WarmupCosineLR<T>(sgd, 2, 0), std::invalid_argument,
                          {"WarmupCosineLR", "'cosine_steps'", "got 0"});
  CHECK_THROWS_WITH_PARTS(WarmupCosineLR<T>(sgd, 2, 10, 2.0), std::invalid_argument,
                          {"WarmupCosineLR", "'start_factor'", "2"});
  CHECK_THROWS_WITH_PARTS(WarmupCosineLR<T>(sgd, 2, 10, 0.1, -0.01), std::invalid_argument,
                          {"WarmupCosineLR", "'eta_min'", "-0.01"});
  CHECK(sgd.lr() == 0.1);  // a rejected schedule leaves the optimizer alone
}

TEST_CASE("optim: state(i) out of range and clip_grad_norm's shape error name the function") {
  Parameter<double> a("a", xt::xarray<double>{1.0, 2.0});
  Parameter<double> b("b", xt::xarray<double>{3.0});
  SGD<double> sgd({&a, &b}, SGDOptions(0.1).momentum(0.9));
  Adam<double> adam({&a, &b}, AdamOptions(0.1));
  AdamW<double> adamw({&a, &b}, AdamWOptions(0.1));
  CHECK(sgd.state(1) == nullptr);  // in range, no state before the first step
  CHECK_THROWS_WITH_PARTS(sgd.state(2), std::invalid_argument,
                          {"xtgrad::SGD::state", "'index'", "2", "less than 2"});
  CHECK_THROWS_WITH_PARTS(adam.state(5), std::invalid_argument, {"xtgrad::Adam::state", "5"});
  CHECK_THROWS_WITH_PARTS(adamw.state(7), std::invalid_argument, {"xtgrad::AdamW::state", "7"});

  a.grad = xt::xarray<double>{1.0, 2.0, 3.0};  // not a's shape
  a.has_grad = true;
  try {
    clip_grad_norm<double>({&a, &b}, 1.0);
    FAIL("clip_grad_norm accepted a gradient of the wrong shape");
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    CHECK(what.rfind("xtgrad::clip_grad_norm: parameter 0 ('a')", 0) == 0);
    CHECK(what.find("::step") == std::string::npos);
  }
  CHECK_THROWS_WITH_PARTS(adam.step(), std::invalid_argument,
                          {"xtgrad::Adam::step", "parameter 0", "'a'", "[3]", "[2]"});
}
