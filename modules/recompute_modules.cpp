#include "recompute_modules.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "../engine/errors.hpp"
#include "../engine/recompute.hpp"
#include "dropout.hpp"

namespace xtgrad {

namespace {

// The Dropout modules among `m` and its descendants.
template <class T>
void add_dropouts(Module<T>& m, std::vector<Dropout<T>*>& out) {
  for (const auto& entry : m.named_modules())
    if (auto* d = dynamic_cast<Dropout<T>*>(entry.second)) out.push_back(d);
}

// The Dropouts' steps, at the start of the forward.
template <class T>
struct DropoutSteps {
  std::vector<Dropout<T>*> dropouts;
  std::vector<std::uint64_t> at_forward;
  bool forward_done = false;

  std::vector<std::uint64_t> now() const {
    std::vector<std::uint64_t> steps;
    for (const Dropout<T>* d : dropouts) steps.push_back(d->step());
    return steps;
  }
  void set(const std::vector<std::uint64_t>& steps) const {
    for (std::size_t k = 0; k < dropouts.size(); ++k) dropouts[k]->set_step(steps[k]);
  }
};

// body under recompute; the first call (the forward) notes the steps, every
// later call (a re-run in backward) runs from them and puts the current ones back.
template <class T>
Var<T> recompute_with_steps(std::vector<Dropout<T>*> dropouts,
                            std::function<Var<T>(const Var<T>&)> body, const Var<T>& x) {
  if (!x.tape_for("recompute_modules", "x").grad_enabled()) return body(x);
  auto steps = std::make_shared<DropoutSteps<T>>();
  steps->dropouts = std::move(dropouts);
  const std::function<Var<T>(const Var<T>&)> fn = [steps, body](const Var<T>& h) {
    if (!steps->forward_done) {
      steps->at_forward = steps->now();
      steps->forward_done = true;
      return body(h);
    }
    struct PutBack {
      const DropoutSteps<T>& steps;
      std::vector<std::uint64_t> values;
      ~PutBack() { steps.set(values); }
    } put_back{*steps, steps->now()};
    steps->set(steps->at_forward);
    return body(h);
  };
  return recompute<T>(fn, x);
}

}  // namespace

template <class T>
Var<T> recompute_modules(const std::vector<Module<T>*>& modules, const Var<T>& x) {
  if (modules.empty())
    detail::fail_argument("recompute_modules", "modules", "is empty, expected one or more");
  std::vector<Dropout<T>*> dropouts;
  for (std::size_t k = 0; k < modules.size(); ++k) {
    if (modules[k] == nullptr)
      detail::fail_argument("recompute_modules", "modules",
                            "holds a null module at position " + std::to_string(k));
    add_dropouts(*modules[k], dropouts);
  }
  return recompute_with_steps<T>(
      std::move(dropouts),
      [modules](const Var<T>& h) {
        Var<T> y = h;
        for (Module<T>* m : modules) y = m->forward(y);
        return y;
      },
      x);
}

template <class T>
Var<T> recompute_module(Module<T>& owner, std::function<Var<T>(const Var<T>&)> body,
                        const Var<T>& x) {
  if (!body) detail::fail_argument("recompute_module", "body", "is empty");
  std::vector<Dropout<T>*> dropouts;
  add_dropouts(owner, dropouts);
  return recompute_with_steps<T>(std::move(dropouts), std::move(body), x);
}

template Var<float> recompute_modules(const std::vector<Module<float>*>&, const Var<float>&);
template Var<double> recompute_modules(const std::vector<Module<double>*>&, const Var<double>&);
template Var<float> recompute_module(Module<float>&, std::function<Var<float>(const Var<float>&)>,
                                     const Var<float>&);
template Var<double> recompute_module(Module<double>&,
                                      std::function<Var<double>(const Var<double>&)>,
                                      const Var<double>&);

}  // namespace xtgrad
