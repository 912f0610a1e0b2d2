// The bad-input table of the optimizers, clip_grad_norm and the learning-rate
// schedules (the machinery is in tests/support/bad_input.hpp).

#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <xtensor/xtensor.hpp>
#include <xtgrad/engine/engine.hpp>
#include <xtgrad/optim/optim.hpp>

#include "support/bad_input.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;

namespace {

// Two parameters with gradients, and each optimizer after one step (so that
// it holds state) with fresh gradients.
template <class T>
struct OptimFixture {
  Parameter<T> p1{"p1", random_array<T>({2, 3}, 1)};
  Parameter<T> p2{"p2", random_array<T>({3}, 2)};
  Parameter<T> saved;  // p2 while a row has changed it
  void save_p2() { saved = p2; }
  void restore_p2() { p2 = saved; }
  void give_gradients(std::uint32_t seed) {
    p1.grad = random_array<T>({2, 3}, seed);
    p2.grad = random_array<T>({3}, seed + 1);
    p1.has_grad = p2.has_grad = true;
  }
};

template <class T, class Opt>
void add_state(State& s, const Opt& o) {
  s.add(o.lr());
  for (std::size_t i = 0; i < o.parameters().size(); ++i) {
    const auto* st = o.state(i);
    if (st == nullptr) {
      s.add(std::string("no state"));
      continue;
    }
    if constexpr (std::is_same_v<std::decay_t<decltype(*st)>, optim::SGDParamState<T>>) {
      s.add(st->momentum_buffer);
    } else {
      s.add(static_cast<std::size_t>(st->step));
      s.add(st->exp_avg);
      s.add(st->exp_avg_sq);
      s.add(st->max_exp_avg_sq);
    }
  }
}

}  // namespace

TEST_CASE_TEMPLATE("bad input: optimizers, clipping and schedules", T, float, double) {
  OptimFixture<T> f;
  std::vector<Parameter<T>*> both = {&f.p1, &f.p2};
  f.give_gradients(10);
  optim::SGD<T> sgd(both, optim::SGDOptions(0.1).momentum(0.9));
  optim::Adam<T> adam(both, optim::AdamOptions(0.01).amsgrad(true));
  optim::AdamW<T> adamw(both, optim::AdamWOptions(0.01));
  sgd.step();
  adam.step();
  adamw.step();
  f.give_gradients(20);

  auto snapshot = [&] {
    State s;
    s.add(f.p1);
    s.add(f.p2);
    add_state<T>(s, sgd);
    add_state<T>(s, adam);
    add_state<T>(s, adamw);
    return s;
  };
  std::vector<Row> rows;
  const auto IA = Expect::invalid_argument;
  const auto bad = row_adder(rows);

  // Construction: the parameter list, then each hyperparameter in turn.
  for (const std::string name : {"SGD", "Adam", "AdamW"}) {
    auto make = [name](std::vector<Parameter<T>*> params, double lr) {
      if (name == "SGD") optim::SGD<T>(std::move(params), optim::SGDOptions(lr));
      if (name == "Adam") optim::Adam<T>(std::move(params), optim::AdamOptions(lr));
      if (name == "AdamW") optim::AdamW<T>(std::move(params), optim::AdamWOptions(lr));
    };
    bad(name + ": no parameters", [=] { make({}, 0.1); }, IA, {name, "'params'", "is empty"});
    bad(name + ": a null parameter",
        [=, &f] {
          make({&f.p1, nullptr}, 0.1);
        },
        IA, {name, "'params'", "null pointer at position 1"});
    bad(name + ": a parameter twice",
        [=, &f] {
          make({&f.p1, &f.p2, &f.p1}, 0.1);
        },
        IA, {name, "'params'", "'p1' twice", "positions 0 and 2"});
    for (double lr : {-1e-3, k_nan, k_inf})
      bad(name + ": lr " + std::to_string(lr), [=, &both] { make(both, lr); }, IA,
          {name, "'lr'", "finite number >= 0"});
  }
  const auto sgd_row = [&](std::string label, optim::SGDOptions o, std::string arg,
                           std::string expected) {
    bad("SGD: " + label, [&, o] { optim::SGD<T>(both, o); }, IA, {"SGD", q(arg), expected});
  };
  sgd_row("momentum < 0", optim::SGDOptions(0.1).momentum(-0.5), "momentum", "got -0.5");
  sgd_row("momentum NaN", optim::SGDOptions(0.1).momentum(k_nan), "momentum", "finite");
  sgd_row("dampening > 1", optim::SGDOptions(0.1).momentum(0.9).dampening(1.5), "dampening",
          "in [0, 1], got 1.5");
  sgd_row("dampening < 0", optim::SGDOptions(0.1).dampening(-0.1), "dampening", "in [0, 1]");
  sgd_row("weight_decay < 0", optim::SGDOptions(0.1).weight_decay(-1), "weight_decay", "got -1");
  sgd_row("weight_decay infinite", optim::SGDOptions(0.1).weight_decay(k_inf), "weight_decay",
          "finite");
  sgd_row("nesterov without momentum", optim::SGDOptions(0.1).nesterov(true), "nesterov",
          "momentum > 0 and dampening == 0");
  sgd_row("nesterov with dampening",
          optim::SGDOptions(0.1).momentum(0.9).dampening(0.1).nesterov(true), "nesterov",
          "dampening 0.1");
  for (const std::string name : {"Adam", "AdamW"}) {
    const auto adam_row = [&, name](std::string label, double beta1, double beta2, double eps,
                                    double weight_decay, std::string arg, std::string expected) {
      bad(name + ": " + label,
          [=, &both] {
            if (name == "Adam")
              optim::Adam<T>(both, optim::AdamOptions(0.1)
                                       .betas({beta1, beta2})
                                       .eps(eps)
                                       .weight_decay(weight_decay));
            else
              optim::AdamW<T>(both, optim::AdamWOptions(0.1)
                                        .betas({beta1, beta2})
                                        .eps(eps)
                                        .weight_decay(weight_decay));
          },
          IA, {name, q(arg), expected});
    };
    adam_row("beta1 = 1", 1.0, 0.999, 1e-8, 0, "betas[0]", "in [0, 1), got 1");
    adam_row("beta1 < 0", -0.1, 0.999, 1e-8, 0, "betas[0]", "got -0.1");
    adam_row("beta1 NaN", k_nan, 0.999, 1e-8, 0, "betas[0]", "in [0, 1)");
    adam_row("beta2 = 1", 0.9, 1.0, 1e-8, 0, "betas[1]", "in [0, 1), got 1");
    adam_row("beta2 > 1", 0.9, 2.0, 1e-8, 0, "betas[1]", "got 2");
    adam_row("eps = 0", 0.9, 0.999, 0, 0, "eps", "> 0, got 0");
    adam_row("eps < 0", 0.9, 0.999, -1e-8, 0, "eps", "got -1e-08");
    adam_row("eps infinite", 0.9, 0.999, k_inf, 0, "eps", "finite");
    adam_row("weight_decay < 0", 0.9, 0.999, 1e-8, -0.01, "weight_decay", "got -0.01");
    adam_row("weight_decay NaN", 0.9, 0.999, 1e-8, k_nan, "weight_decay", "finite");
  }

  // Methods: set_lr, state, and step with a gradient or value of the wrong shape.
  const std::vector<std::pair<std::string, optim::Optimizer<T>*>> optimizers = {
      {"SGD", &sgd}, {"Adam", &adam}, {"AdamW", &adamw}};
  for (const auto& [name, o] : optimizers) {
    for (double lr : {-0.5, k_nan, k_inf})
      bad(name + "::set_lr(" + std::to_string(lr) + ")", [o = o, lr] { o->set_lr(lr); }, IA,
          {name + "::set_lr", "'lr'", "finite number >= 0"});
    // The second parameter is wrong, the first fine: neither may change.
    rows.push_back({name + "::step: a gradient of the wrong shape",
                    [o = o] { o->step(); },
                    IA,
                    {name + "::step", "parameter 1", "'p2'", "gradient of shape [2]",
                     "expected its value's shape [3]"},
                    [&f] {
                      f.save_p2();
                      f.p2.grad = xt::zeros<T>({2});
                    },
                    [&f] { f.restore_p2(); }});
    rows.push_back({name + "::step: a parameter that changed shape",
                    [o = o] { o->step(); },
                    Expect::logic_error,
                    {name + "::step", "parameter 1", "'p2'", "[4]", "created for shape [3]"},
                    [&f] {
                      f.save_p2();
                      f.p2.value = xt::zeros<T>({4});
                      f.p2.grad = xt::ones<T>({4});
                    },
                    [&f] { f.restore_p2(); }});
  }
  bad("SGD::state: index out of range", [&] { sgd.state(2); }, Expect::out_of_range, {"2"});
  bad("Adam::state: index out of range", [&] { adam.state(5); }, Expect::out_of_range, {"5"});
  bad("AdamW::state: index out of range", [&] { adamw.state(7); }, Expect::out_of_range, {"7"});

  // clip_grad_norm
  const auto clip = [&](std::string label, std::vector<Parameter<T>*> params, double max_norm,
                        double norm_type, std::string arg, std::string expected) {
    bad("clip_grad_norm: " + label,
        [params, max_norm, norm_type] { optim::clip_grad_norm<T>(params, max_norm, norm_type); },
        IA, {"clip_grad_norm", q(arg), expected});
  };
  clip("max_norm < 0", both, -1, 2, "max_norm", ">= 0, got -1");
  clip("max_norm NaN", both, k_nan, 2, "max_norm", "got nan");
  clip("norm_type 0", both, 1, 0, "norm_type", "> 0 (or infinity), got 0");
  clip("norm_type < 0", both, 1, -2, "norm_type", "got -2");
  clip("norm_type NaN", both, 1, k_nan, "norm_type", "got nan");
  clip("a null parameter", {&f.p1, nullptr}, 1, 2, "params", "null pointer at position 1");
  rows.push_back({"clip_grad_norm: a gradient of the wrong shape",
                  [&] { optim::clip_grad_norm<T>(both, 1e-3); },
                  IA,
                  {"clip_grad_norm", "parameter 1", "'p2'", "[5]", "[3]"},
                  [&f] {
                    f.save_p2();
                    f.p2.grad = xt::ones<T>({5});
                  },
                  [&f] { f.restore_p2(); }});

  // Schedules: a bad argument must leave the optimizer's lr alone.
  bad("StepLR: step_size 0", [&] { optim::StepLR<T>(sgd, 0); }, IA,
      {"StepLR", "'step_size'", ">= 1, got 0"});
  bad("StepLR: step_size < 0", [&] { optim::StepLR<T>(sgd, -3); }, IA,
      {"StepLR", "'step_size'", "got -3"});
  for (double gamma : {0.0, -0.5, k_nan, k_inf})
    bad("StepLR: gamma " + std::to_string(gamma), [&, gamma] { optim::StepLR<T>(adam, 2, gamma); },
        IA, {"StepLR", "'gamma'", "finite number > 0"});
  bad("CosineAnnealingLR: T_max 0", [&] { optim::CosineAnnealingLR<T>(sgd, 0); }, IA,
      {"CosineAnnealingLR", "'T_max'", ">= 1, got 0"});
  for (double eta_min : {-1e-3, k_nan, k_inf})
    bad("CosineAnnealingLR: eta_min " + std::to_string(eta_min),
        [&, eta_min] { optim::CosineAnnealingLR<T>(adamw, 10, eta_min); }, IA,
        {"CosineAnnealingLR", "'eta_min'", "finite number >= 0"});
  bad("LinearWarmup: warmup_steps < 0", [&] { optim::LinearWarmup<T>(sgd, -1, 0.1); }, IA,
      {"LinearWarmup", "'warmup_steps'", ">= 0, got -1"});
  for (double start : {-0.1, 1.5, k_nan})
    bad("LinearWarmup: start_factor " + std::to_string(start),
        [&, start] { optim::LinearWarmup<T>(adam, 10, start); }, IA,
        {"LinearWarmup", "'start_factor'", "in [0, 1]"});
  bad("WarmupCosineLR: warmup_steps < 0", [&] { optim::WarmupCosineLR<T>(sgd, -1, 10); }, IA,
      {"WarmupCosineLR", "'warmup_steps'", "got -1"});
  bad("WarmupCosineLR: cosine_steps 0", [&] { optim::WarmupCosineLR<T>(sgd, 5, 0); }, IA,
      {"WarmupCosineLR", "'cosine_steps'", ">= 1, got 0"});
  bad("WarmupCosineLR: start_factor > 1", [&] { optim::WarmupCosineLR<T>(sgd, 5, 10, 2.0); }, IA,
      {"WarmupCosineLR", "'start_factor'", "got 2"});
  bad("WarmupCosineLR: eta_min < 0", [&] { optim::WarmupCosineLR<T>(adam, 5, 10, 0.0, -1.0); }, IA,
      {"WarmupCosineLR", "'eta_min'", "got -1"});

  report("optim", run_rows(rows, snapshot));
}
