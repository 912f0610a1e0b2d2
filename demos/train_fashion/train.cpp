// The training loop and the evaluation of train.hpp.

#include "train.hpp"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <xtensor/xview.hpp>
#include <xtgrad/optim/optim.hpp>
#include <xtgrad/training/evaluation.hpp>
#include <xtgrad/training/progress.hpp>
#include <xtgrad/training/run_state.hpp>

#include "../common/program.hpp"

namespace fashion {

namespace {

using namespace xtgrad;

constexpr std::size_t k_eval_batch = 1000;
constexpr const char* k_program = "train_fashion";
constexpr const char* k_flip_key = "option.flip";    // --augment: 1 for flip, 0 for none
constexpr const char* k_epochs_key = "epochs_done";  // the history's length

// The options a resumed run must repeat, as saved extras.
TrainingExtras identity_extras(const ModelConfig& config, const TrainOptions& o,
                               std::size_t train_images) {
  TrainingExtras e;
  demos::add_extras(e, "option.", config);
  demos::add_extras(e, "option.", o);
  e.integers["option.model_is_mixer"] = config.kind == "mixer";
  e.integers[k_flip_key] = o.flip;
  e.integers["option.train_images"] = training::as_integer(train_images);
  return e;
}

// "saved with --epochs 2, this run has 3"; --augment by its names.
struct Mismatch {
  template <class V>
  std::invalid_argument operator()(const std::string& key, V saved, V now) const {
    if (key != k_flip_key) return training::option_mismatch(key, saved, now);
    return std::invalid_argument(std::string("saved with --augment ") + (now ? "none" : "flip") +
                                 ", this run has " + (now ? "flip" : "none"));
  }
};

// One optimizer step on `batch`, observed as step `observed`; this rank's loss.
double train_step(training::TrainingRun& run, Module<float>& model, const Batch<float>& batch,
                  const CrossEntropyOptions& loss_options, training::StepObserver<float>& observer,
                  std::size_t observed) {
  Var<float> loss;
  {
    auto profiled = observer.step(run.tape, observed);
    run.tape.clear();
    loss = cross_entropy(model(run.tape.leaf(batch.inputs, false)), batch.labels, loss_options);
    run.tape.backward(loss);
    run.optimizer.finish();
    observer.region("optimizer.step", [&] { run.step(); });
  }
  observer.graph(run.tape, {loss}, model.named_parameters(), observed);
  return loss.value()();
}

}  // namespace

const training::HistoryFields<EpochRecord>& epoch_fields() {
  static const training::HistoryFields<EpochRecord> fields{
      {},
      {{"train_loss", &EpochRecord::train_loss},
       {"test_loss", &EpochRecord::test_loss},
       {"test_accuracy", &EpochRecord::test_accuracy},
       {"lr", &EpochRecord::lr},
       {"seconds", &EpochRecord::seconds}}};
  return fields;
}

Evaluation evaluate(Module<float>& model, const Split& split) {
  const std::size_t n = split.labels.size();
  training::CrossEntropyScore<float> score;
  for (std::size_t start = 0; start < n; start += k_eval_batch) {
    const std::size_t stop = std::min(n, start + k_eval_batch);
    const Indices labels = xt::view(split.labels, xt::range(start, stop));
    score.add(model.infer(xt::view(split.images, xt::range(start, stop))), labels);
  }
  return {score.mean_loss(), score.accuracy(), std::move(score.predictions)};
}

TrainResult train(Module<float>& model, const ModelConfig& config, FashionMnist& data,
                  const TrainOptions& o, std::FILE* out, training::Parallel& parallel) {
  const std::size_t train_images = data.train.labels.size();
  Batcher<float> batcher(std::move(data.train.images), data.train.labels,
                         {o.batch_size, /*shuffle=*/true, /*drop_last=*/false, o.seed});
  training::Shards shards(parallel, train_images, {o.batch_size, true, false, o.seed});
  const std::size_t steps_per_epoch = batcher.batches_per_epoch();
  const auto total_steps = static_cast<std::int64_t>(steps_per_epoch * o.epochs);
  const auto warmup = std::min<std::int64_t>(
      static_cast<std::int64_t>(std::llround(o.warmup_epochs * steps_per_epoch)), total_steps / 2);

  training::TrainingRun run(
      parallel, model,
      training::decay_groups(model, optim::AdamWOptions(o.lr).weight_decay(o.weight_decay)), o.zero,
      training::warmup_cosine(warmup, total_steps));
  const TrainingExtras identity = identity_extras(config, o, train_images);
  TrainResult result;
  std::size_t step = 0;
  if (!o.resume.empty()) {
    const training::SavedRun saved = run.resume(o.resume, identity, k_program, Mismatch{});
    step = saved.size("step");
    result.history = saved.history(k_epochs_key, epoch_fields());
    for (std::size_t e = 0; e < result.history.size(); ++e) result.history[e].epoch = e + 1;
  }
  const std::size_t first_epoch = result.history.size();
  const std::size_t last_epoch = o.last(first_epoch, o.epochs, "epochs", "before epoch");

  CrossEntropyOptions loss_options;
  loss_options.label_smoothing = o.label_smoothing;
  Batch<float> batch;
  // This call's steps, counted from 1, are the ones observed.
  training::StepObserver<float> observer(o.observe, (last_epoch - first_epoch) * steps_per_epoch);
  std::size_t observed = 0;
  Evaluation last_test;  // of the last epoch: the final one
  for (std::size_t epoch = first_epoch; epoch < last_epoch; ++epoch) {
    training::Progress progress(  // its training time is the epoch's
        0, steps_per_epoch, steps_per_epoch, out, "img/s",
        "epoch " + std::to_string(epoch + 1) + "/" + std::to_string(o.epochs),
        training::LossMean::run);
    model.train();
    batcher.start_epoch(epoch);
    shards.start_epoch(epoch);
    double loss_sum = 0.0;
    std::size_t in_epoch = 0;
    while (shards.active() ? shards.next(batcher, model, batch) : batcher.next(batch)) {
      if (o.flip) random_flip(batch, o.seed, epoch);
      const double value =  // the global batch's mean
          parallel.mean(train_step(run, model, batch, loss_options, observer, ++observed));
      loss_sum += value;
      ++step;
      ++in_epoch;
      progress.update(in_epoch, batch.labels.size() * static_cast<std::size_t>(parallel.size()),
                      value);
    }
    progress.finish();
    model.eval();
    EpochRecord record;
    record.epoch = epoch + 1;
    record.train_loss = loss_sum / static_cast<double>(in_epoch);
    record.seconds = progress.train_seconds();
    record.lr = run.schedule->last_lr();
    last_test = evaluate(model, data.test);
    record.test_loss = last_test.loss;
    record.test_accuracy = last_test.accuracy;
    result.history.push_back(record);
    std::fprintf(out,
                 "epoch %zu/%zu  train loss %.4f  test loss %.4f  test accuracy %.4f  (%.1f s)\n",
                 record.epoch, o.epochs, record.train_loss, record.test_loss, record.test_accuracy,
                 record.seconds);
    std::fflush(out);
    if (o.save.empty()) continue;
    // collective: a sharded state is gathered to rank 0, which writes
    run.save(o.save, training::position_extras(identity, step, k_epochs_key, result.history,
                                               epoch_fields()));
  }
  observer.report(std::cout);
  result.final_test = std::move(last_test);
  result.steps = step;
  return result;
}

}  // namespace fashion
