// The training loop and the evaluation of train.hpp.

#include "train.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

#include <xtensor/xview.hpp>
#include <xtgrad/optim/optim.hpp>

#include "checkpoint.hpp"
#include "progress.hpp"

namespace fashion {

namespace {

using namespace xtgrad;
using Clock = std::chrono::steady_clock;

constexpr std::size_t k_eval_batch = 1000;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

Evaluation evaluate(Classifier& model, const Split& split) {
  const bool was_training = model.training();
  model.set_training(false);
  const std::size_t n = split.labels.size();
  Evaluation result;
  result.predictions.resize(n);
  double loss_sum = 0.0;
  std::size_t correct = 0;
  for (std::size_t start = 0; start < n; start += k_eval_batch) {
    const std::size_t stop = std::min(n, start + k_eval_batch);
    const xt::xarray<float> logits = model.infer(xt::view(split.images, xt::range(start, stop)));
    // Cross-entropy of each row, log-sum-exp shifted by the row's maximum.
    for (std::size_t i = start; i < stop; ++i) {
      const float* row = logits.data() + (i - start) * k_classes;
      const std::size_t best =
          static_cast<std::size_t>(std::max_element(row, row + k_classes) - row);
      double sum = 0.0;
      for (std::size_t c = 0; c < k_classes; ++c) sum += std::exp(double(row[c]) - row[best]);
      loss_sum += std::log(sum) + row[best] - row[split.labels(i)];
      result.predictions[i] = best;
      correct += best == static_cast<std::size_t>(split.labels(i));
    }
  }
  result.loss = loss_sum / static_cast<double>(n);
  result.accuracy = static_cast<double>(correct) / static_cast<double>(n);
  model.set_training(was_training);
  return result;
}

TrainResult train(Classifier& model, const ModelConfig& config, FashionMnist& data,
                  const TrainOptions& o, std::FILE* out) {
  Batcher<float> batcher(std::move(data.train.images), data.train.labels,
                         {o.batch_size, /*shuffle=*/true, /*drop_last=*/false, o.seed});
  const std::size_t steps_per_epoch = batcher.batches_per_epoch();
  const auto total_steps = static_cast<std::int64_t>(steps_per_epoch * o.epochs);
  const auto warmup = std::min<std::int64_t>(
      static_cast<std::int64_t>(std::llround(o.warmup_epochs * steps_per_epoch)), total_steps / 2);

  TrainResult result;
  if (!o.resume.empty()) result.history = resume_run(o.resume, model, config, o.seed).history;
  const std::size_t first_epoch = result.history.size();
  if (first_epoch > o.epochs)
    throw std::invalid_argument("--resume: the run has " + std::to_string(first_epoch) +
                                " epochs done, more than --epochs " + std::to_string(o.epochs));

  optim::AdamW<float> optimizer(model.parameters(),
                                optim::AdamWOptions(o.lr).weight_decay(o.weight_decay));
  optim::WarmupCosineLR<float> schedule(optimizer, warmup,
                                        std::max<std::int64_t>(1, total_steps - warmup));
  std::size_t step = first_epoch * steps_per_epoch;
  for (std::size_t s = 0; s < step; ++s) schedule.step();

  CrossEntropyOptions loss_options;
  loss_options.label_smoothing = o.label_smoothing;
  Tape<float> tape;
  Batch<float> batch;
  for (std::size_t epoch = first_epoch; epoch < o.epochs; ++epoch) {
    const Clock::time_point start = Clock::now();
    model.set_training(true);
    batcher.start_epoch(epoch);
    Progress progress(epoch + 1, o.epochs, steps_per_epoch, out);
    double loss_sum = 0.0;
    std::size_t in_epoch = 0;
    while (batcher.next(batch)) {
      tape.clear();
      model.set_dropout_key(o.seed, step);
      const Var<float> x = tape.leaf(batch.inputs, false);
      const Var<float> loss = cross_entropy(model(x), batch.labels, loss_options);
      tape.backward(loss);
      optimizer.step();
      optimizer.zero_grad();
      schedule.step();
      const double value = loss.value()();
      loss_sum += value;
      ++step;
      ++in_epoch;
      progress.update(in_epoch, batch.labels.size(), value);
    }
    progress.finish();
    EpochRecord record;
    record.epoch = epoch + 1;
    record.train_loss = loss_sum / static_cast<double>(in_epoch);
    record.seconds = seconds_since(start);
    record.lr = schedule.last_lr();
    const Evaluation test = evaluate(model, data.test);
    record.test_loss = test.loss;
    record.test_accuracy = test.accuracy;
    result.history.push_back(record);
    std::fprintf(out,
                 "epoch %zu/%zu  train loss %.4f  test loss %.4f  test accuracy %.4f  (%.1f s)\n",
                 record.epoch, o.epochs, record.train_loss, record.test_loss, record.test_accuracy,
                 record.seconds);
    std::fflush(out);
    if (!o.save.empty()) save_run(o.save, model, {config, o.seed, result.history});
  }
  model.set_training(false);
  result.final_test = evaluate(model, data.test);
  result.steps = step;
  return result;
}

}  // namespace fashion
