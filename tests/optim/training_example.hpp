// The training utilities together: parameter groups, gradient accumulation
// over micro-batches, and a run that saves its state and resumes bit for bit.
#include <cstdint>
#include <filesystem>
#include <vector>

#include <xtgrad/engine/engine.hpp>
#include <xtgrad/modules/modules.hpp>
#include <xtgrad/optim/optim.hpp>
#include <xtgrad/training/training_state.hpp>

namespace example {
using namespace xtgrad;

// Two groups, as usual for Transformers: weight decay on the matrices only,
// none on biases and norm weights (the 1-D parameters).
template <class T>
std::vector<optim::AdamWParamGroup<T>> decay_groups(Module<T>& model, double lr,
                                                    double weight_decay) {
  std::vector<Parameter<T>*> decay, no_decay;
  for (Parameter<T>* p : model.parameters())
    (p->value.dimension() >= 2 ? decay : no_decay).push_back(p);
  return {{decay, optim::AdamWOptions(lr).weight_decay(weight_decay)},
          {no_decay, optim::AdamWOptions(lr).weight_decay(0.0)}};
}

// One optimizer step over k equal micro-batches: gradients accumulate in
// Parameter::grad until zero_grad(), and each mean loss is scaled by 1/k, so
// the sum is the gradient of the mean loss over the whole batch.
template <class T>
void accumulate_and_step(Module<T>& model, optim::Optimizer<T>& optimizer,
                         optim::LRScheduler<T>& schedule, const std::vector<xt::xarray<T>>& inputs,
                         const std::vector<xt::xarray<T>>& targets) {
  const T scale = T(1) / static_cast<T>(inputs.size());
  for (std::size_t m = 0; m < inputs.size(); ++m) {
    Tape<T> tape;
    Var<T> loss = mse(model(tape.leaf(inputs[m], false)), tape.leaf(targets[m], false)) * scale;
    tape.backward(loss);
  }
  optim::clip_grad_norm(optimizer.parameters(), 1.0);
  optimizer.step();
  optimizer.zero_grad();
  schedule.step();
}

// Saving after a step, and resuming: the step to continue from (0 for a
// fresh run). The objects are built as for the first run, then overwritten.
template <class T>
void save(const std::filesystem::path& dir, const Module<T>& model,
          const optim::Optimizer<T>& optimizer, const optim::LRScheduler<T>& schedule,
          std::int64_t steps_done) {
  save_training_state(dir, model, optimizer, &schedule, {{{"step", steps_done}}, {}});
}

template <class T>
std::int64_t resume(const std::filesystem::path& dir, Module<T>& model,
                    optim::Optimizer<T>& optimizer, optim::LRScheduler<T>& schedule) {
  if (!std::filesystem::exists(dir)) return 0;
  return load_training_state(dir, model, optimizer, &schedule).integers.at("step");
}

}  // namespace example
