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
  bad("SGD::state: index out of range", [&] { sgd.state(2); }, IA,
      {"SGD::state: argument 'index' is 2, expected less than 2 (the number of parameters)"});
  bad("Adam::state: index out of range", [&] { adam.state(5); }, IA,
      {"Adam::state", "'index' is 5"});
  bad("AdamW::state: index out of range", [&] { adamw.state(7); }, IA,
      {"AdamW::state", "'index' is 7"});

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

TEST_CASE_TEMPLATE("bad input: optimizer and schedule state dicts", T, float, double) {
  OptimFixture<T> f;
  std::vector<Parameter<T>*> both = {&f.p1, &f.p2};
  f.give_gradients(10);
  optim::SGD<T> sgd(both, optim::SGDOptions(0.1).momentum(0.9));
  optim::Adam<T> adam(both, optim::AdamOptions(0.01).amsgrad(true));
  optim::AdamW<T> adamw(both, optim::AdamWOptions(0.01));
  sgd.step();
  adam.step();
  adamw.step();
  optim::StepLR<T> step_lr(sgd, 3);
  optim::CosineAnnealingLR<T> cosine(adam, 10);
  step_lr.step();

  auto snapshot = [&] {
    State s;
    s.add(f.p1);
    s.add(f.p2);
    add_state<T>(s, sgd);
    add_state<T>(s, adam);
    add_state<T>(s, adamw);
    for (const optim::LRScheduler<T>* schedule :
         {static_cast<const optim::LRScheduler<T>*>(&step_lr),
          static_cast<const optim::LRScheduler<T>*>(&cosine)}) {
      s.add(static_cast<std::size_t>(schedule->last_epoch()));
      s.add(schedule->last_lr());
      s.add(schedule->base_lr());
    }
    return s;
  };
  std::vector<Row> rows;
  const auto IA = Expect::invalid_argument;
  // A row loading `good` changed by `edit` into `target`.
  const auto bad_state = [&](const std::string& label, auto& target, StateDict<T> good,
                             const std::function<void(StateDict<T>&)>& edit,
                             std::vector<std::string> parts) {
    edit(good);
    rows.push_back(
        {label, [&target, good] { target.load_state_dict(good); }, IA, std::move(parts)});
  };

  for (optim::Optimizer<T>* o :
       {static_cast<optim::Optimizer<T>*>(&sgd), static_cast<optim::Optimizer<T>*>(&adam),
        static_cast<optim::Optimizer<T>*>(&adamw)}) {
    const std::string fn = o->name() + "::load_state_dict";
    const StateDict<T> good = o->state_dict();
    const std::string buffer = o == &sgd ? "state.1.momentum_buffer" : "state.1.exp_avg_sq";
    const auto row = [&](const std::string& label, std::function<void(StateDict<T>&)> edit,
                         std::vector<std::string> parts) {
      parts.insert(parts.begin(), fn);
      bad_state(o->name() + ": " + label, *o, good, edit, parts);
    };
    row("another optimizer's type",
        [&](StateDict<T>& s) { s.strings["type"] = o == &sgd ? "Adam" : "SGD"; },
        {"string 'type'", "expected " + q(o->name())});
    row("no type", [](StateDict<T>& s) { s.strings.clear(); }, {"has no string 'type'"});
    row("two groups", [](StateDict<T>& s) { s.integers["param_groups"] = 2; },
        {"'param_groups' is 2, expected 1"});
    row("three parameters", [](StateDict<T>& s) { s.integers["param_groups.0.params"] = 3; },
        {"'param_groups.0.params' is 3, expected 2"});
    row("no lr", [](StateDict<T>& s) { s.reals.erase("param_groups.0.lr"); },
        {"has no real 'param_groups.0.lr'"});
    row("a negative lr", [](StateDict<T>& s) { s.reals["param_groups.0.lr"] = -1; },
        {"'param_groups.0.lr'", "finite number >= 0, got -1"});
    row("a buffer of the wrong shape",
        [&](StateDict<T>& s) { s.arrays[buffer] = xt::zeros<T>({4}); },
        {q(buffer), "has shape [4], expected [3]", "parameter 1 ('p2')"});
    if (o != &sgd)  // (SGD: a parameter without a buffer is one not stepped yet)
      row("a missing buffer", [&](StateDict<T>& s) { s.arrays.erase(buffer); },
          {"has no array " + q(buffer), "[3]"});
    row("state for a third parameter",
        [&](StateDict<T>& s) { s.arrays["state.2.exp_avg"] = xt::zeros<T>({3}); },
        {"unexpected array 'state.2.exp_avg'"});
    row("an unknown scalar", [](StateDict<T>& s) { s.reals["param_groups.0.foo"] = 1; },
        {"unexpected real 'param_groups.0.foo'"});
  }
  const auto sgd_row = [&](const std::string& label, std::function<void(StateDict<T>&)> edit,
                           std::vector<std::string> parts) {
    parts.insert(parts.begin(), "SGD::load_state_dict");
    bad_state("SGD: " + label, sgd, sgd.state_dict(), edit, parts);
  };
  sgd_row("a momentum buffer without momentum",
          [](StateDict<T>& s) { s.reals["param_groups.0.momentum"] = 0; },
          {"'state.0.momentum_buffer'", "momentum is 0"});
  sgd_row("nesterov 2", [](StateDict<T>& s) { s.integers["param_groups.0.nesterov"] = 2; },
          {"'param_groups.0.nesterov' is 2, expected in [0, 1]"});
  sgd_row("dampening 2", [](StateDict<T>& s) { s.reals["param_groups.0.dampening"] = 2; },
          {"(param group 0)", "'dampening'", "in [0, 1], got 2"});
  const auto adam_row = [&](const std::string& label, auto& target,
                            std::function<void(StateDict<T>&)> edit,
                            std::vector<std::string> parts) {
    parts.insert(parts.begin(), target.name() + "::load_state_dict");
    bad_state(target.name() + ": " + label, target, target.state_dict(), edit, parts);
  };
  adam_row("step 0", adam, [](StateDict<T>& s) { s.integers["state.0.step"] = 0; },
           {"'state.0.step' is 0, expected in [1, "});
  adam_row("no step", adam, [](StateDict<T>& s) { s.integers.erase("state.1.step"); },
           {"has no integer 'state.1.step'"});
  adam_row("amsgrad without max_exp_avg_sq", adam,
           [](StateDict<T>& s) { s.arrays.erase("state.0.max_exp_avg_sq"); },
           {"has no array 'state.0.max_exp_avg_sq'"});
  adam_row("max_exp_avg_sq without amsgrad", adamw,
           [](StateDict<T>& s) {
             s.arrays["state.0.max_exp_avg_sq"] = xt::zeros<T>({2, 3});
           },
           {"'state.0.max_exp_avg_sq'", "amsgrad off"});
  adam_row("beta1 = 1", adamw, [](StateDict<T>& s) { s.reals["param_groups.0.beta1"] = 1; },
           {"(param group 0)", "'betas[0]'", "in [0, 1), got 1"});
  adam_row("eps NaN", adam, [](StateDict<T>& s) { s.reals["param_groups.0.eps"] = k_nan; },
           {"'eps'", "finite number > 0"});

  const auto schedule_row = [&](const std::string& label, auto& target,
                                std::function<void(StateDict<T>&)> edit,
                                std::vector<std::string> parts) {
    parts.insert(parts.begin(), target.name() + "::load_state_dict");
    bad_state(target.name() + ": " + label, target, target.state_dict(), edit, parts);
  };
  schedule_row("another schedule's type", step_lr,
               [](StateDict<T>& s) { s.strings["type"] = "CosineAnnealingLR"; },
               {"'CosineAnnealingLR'", "expected 'StepLR'"});
  schedule_row("last_epoch -1", cosine, [](StateDict<T>& s) { s.integers["last_epoch"] = -1; },
               {"'last_epoch' is -1"});
  schedule_row("two groups", cosine, [](StateDict<T>& s) { s.integers["param_groups"] = 2; },
               {"'param_groups' is 2, expected 1"});
  schedule_row("base lr NaN", step_lr, [](StateDict<T>& s) { s.reals["base_lrs.0"] = k_nan; },
               {"'base_lrs.0'", "finite number >= 0"});
  schedule_row("no last lr", step_lr, [](StateDict<T>& s) { s.reals.erase("last_lrs.0"); },
               {"has no real 'last_lrs.0'"});
  schedule_row("an array", cosine,
               [](StateDict<T>& s) { s.arrays["base_lrs"] = xt::zeros<T>({1}); },
               {"unexpected array 'base_lrs'"});
  rows.push_back({"SGD::set_lr: a group out of range",
                  [&] { sgd.set_lr(1, 0.1); },
                  IA,
                  {"SGD::set_lr", "'group' is 1", "less than 1"}});
  rows.push_back(
      {"Adam::lr: a group out of range", [&] { adam.lr(3); }, IA, {"Adam::lr", "'group' is 3"}});
  // Every group or index argument names the function called, the argument and the range.
  const auto bad = row_adder(rows);
  const std::string groups = ", expected less than 1 (the number of groups)";
  bad("SGD::options: a group out of range", [&] { sgd.options(1); }, IA,
      {"xtgrad::SGD::options: argument 'group' is 1" + groups});
  bad("Adam::options: a group out of range", [&] { adam.options(2); }, IA,
      {"xtgrad::Adam::options: argument 'group' is 2" + groups});
  bad("AdamW::options: a group out of range", [&] { adamw.options(3); }, IA,
      {"xtgrad::AdamW::options: argument 'group' is 3" + groups});
  bad("StepLR::last_lr: a group out of range", [&] { step_lr.last_lr(1); }, IA,
      {"xtgrad::StepLR::last_lr: argument 'group' is 1" + groups});
  bad("CosineAnnealingLR::base_lr: a group out of range", [&] { cosine.base_lr(4); }, IA,
      {"xtgrad::CosineAnnealingLR::base_lr: argument 'group' is 4" + groups});
  bad("StepLR::lr_at: a group out of range", [&] { step_lr.lr_at(2, 1); }, IA,
      {"xtgrad::StepLR::lr_at: argument 'group' is 1" + groups});
  bad("CosineAnnealingLR::lr_at: an epoch < 0", [&] { cosine.lr_at(-1); }, IA,
      {"xtgrad::CosineAnnealingLR::lr_at: argument 't' is -1, expected an epoch >= 0"});
  rows.push_back({"AdamW::set_lr: a negative lr for group 0",
                  [&] { adamw.set_lr(0, -0.5); },
                  IA,
                  {"AdamW::set_lr", "'lr'", "finite number >= 0, got -0.5"}});
  rows.push_back({"check_state_dict names itself",
                  [&] {
                    StateDict<T> s = adamw.state_dict();
                    s.strings["type"] = "Adam";
                    adamw.check_state_dict(s);
                  },
                  IA,
                  {"AdamW::check_state_dict", "expected 'AdamW'"}});

  report("optim state", run_rows(rows, snapshot));
}
