// train_fashion: a classifier on Fashion-MNIST (an MLP or an MLP-Mixer),
// trained with AdamW (weight decay on the matrices only), warm-up and cosine
// decay, label smoothing; --save / --resume continue a run bit for bit;
// --graph / --profile show the training steps' tape; --zero 1|2 shards the
// optimizer (ZeRO) under mpirun; writes
// summary.json, history.csv, confusion.csv and the pictures of report.hpp to
// --out. Exit codes: 0 done, 2 bad options or data, 1 anything else (a file
// that cannot be written, gnuplot failing).

#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>
#include <xtgrad/modules/parameter_count.hpp>

#include "../common/program.hpp"
#include "data.hpp"
#include "report.hpp"
#include "train.hpp"
#include "zoo/fashion/models.hpp"

namespace {

using namespace fashion;
namespace fs = std::filesystem;

struct Options {
  ModelConfig model;
  TrainOptions train;
  demos::AppOptions app{2, "f32", "fashion_out", k_default_data_dir};
  std::size_t train_limit = 0, test_limit = 0;
  std::string augment;  // empty: the model's default
};

nlohmann::json summary_of(const Options& o, std::size_t parameters, const FashionMnist& data,
                          const TrainResult& r, double data_seconds, double total_seconds) {
  double train_seconds = 0.0;
  for (const EpochRecord& e : r.history) train_seconds += e.seconds;
  const double epochs = static_cast<double>(r.history.size());
  const ModelConfig& m = o.model;
  nlohmann::json model = {{"kind", m.kind}, {"parameters", parameters}};
  if (m.kind == "mlp") {
    model["hidden"] = m.hidden;
    model["dropout"] = m.dropout;
  } else {
    model.update({{"patch", m.patch},
                  {"width", m.width},
                  {"blocks", m.blocks},
                  {"token_hidden", m.token_hidden},
                  {"channel_hidden", m.channel_hidden}});
  }
  nlohmann::json summary = o.train;  // the options that fix the run's numbers
  summary.update({{"model", model},
                  {"augment", o.train.flip ? "flip" : "none"},
                  {"threads", o.app.threads},
                  {"train_images", data.train.labels.size()},
                  {"test_images", data.test.labels.size()},
                  {"final_train_loss", r.history.empty() ? 0.0 : r.history.back().train_loss},
                  {"final_test_loss", r.final_test.loss},
                  {"final_test_accuracy", r.final_test.accuracy},
                  {"steps", r.steps},
                  {"data_seconds", data_seconds},
                  {"train_seconds", train_seconds},
                  {"seconds_per_epoch", epochs > 0 ? train_seconds / epochs : 0.0},
                  {"images_per_second",
                   train_seconds > 0 ? epochs * data.train.labels.size() / train_seconds : 0.0},
                  {"total_seconds", total_seconds}});
  return summary;
}

int run(const Options& o, demos::Program& program) {
  xtgrad::training::Parallel& parallel = program.parallel;
  program.start(o.app);
  FashionMnist data = load_fashion_mnist(o.app.data_dir, o.train_limit, o.test_limit);
  const double data_seconds = program.seconds();
  const std::size_t n_train = data.train.labels.size();
  xtgrad::Generator generator(o.train.seed);
  auto model = make_model(o.model, generator);
  const std::size_t parameters = xtgrad::parameter_count(*model);
  // Under mpirun rank 0 alone prints and writes; the others train quietly.
  if (!parallel.quiet())
    std::printf(
        "train_fashion: %s, %zu parameters; %zu training and %zu test images (%.1f s to load)\n",
        o.model.kind.c_str(), parameters, n_train, data.test.labels.size(), data_seconds);
  program.print_processes(o.train.batch_size, "images", o.train.zero);
  const fs::path out(o.app.out);
  if (!parallel.quiet()) fs::create_directories(out);

  const TrainResult result = train(*model, o.model, data, o.train, parallel.out(), parallel);
  if (parallel.quiet()) return 0;
  const double total_seconds = program.seconds();

  xtgrad::training::HistoryFields<EpochRecord> columns = epoch_fields();
  columns.sizes = {{"epoch", &EpochRecord::epoch}};
  xtgrad::training::write_history_csv(out / "history.csv", result.history, columns);
  write_confusion_csv(out / "confusion.csv",
                      confusion_matrix(data.test, result.final_test.predictions));
  nlohmann::json summary = summary_of(o, parameters, data, result, data_seconds, total_seconds);
  write_summary_json(out / "summary.json", summary);
  const PlotResult plotted = plot_all(out, data.test, result.final_test.predictions);
  std::printf("test accuracy %.4f after %zu epochs; %.1f s in all (%.1f s per epoch)\n",
              result.final_test.accuracy, result.history.size(), total_seconds,
              summary["seconds_per_epoch"].get<double>());
  return demos::print_wrote(out, "summary.json, history.csv, confusion.csv", plotted,
                            "loss.png, accuracy.png, confusion.png, misclassified.png", "pictures");
}

void add_options(demos::Program& program, Options& o) {
  CLI::App& app = program.app;
  ModelConfig& m = o.model;
  program.add("--model", m.kind, "mlp (784-256-256-10, GELU, dropout) or mixer (MLP-Mixer)",
              CLI::IsMember({"mlp", "mixer"}));
  program.add("--epochs", o.train.epochs, "training epochs", CLI::Range(1, 10000));
  program.add("--batch-size", o.train.batch_size, "images per mini-batch", CLI::Range(1, 60000));
  app.add_option("--lr", o.train.lr,
                 "peak learning rate of AdamW [default: 1e-3 for mlp, 2e-3 "
                 "for mixer, whose flipped images need the longer steps to "
                 "fit in 10 epochs]")
      ->check(CLI::PositiveNumber);
  program.add("--weight-decay", o.train.weight_decay,
              "AdamW's decoupled weight decay, on the weight matrices only (none on biases "
              "and LayerNorm weights)",
              CLI::NonNegativeNumber);
  program.add("--warmup-epochs", o.train.warmup_epochs,
              "epochs of linear warm-up before the cosine decay (at most half the run)",
              CLI::NonNegativeNumber);
  program.add("--label-smoothing", o.train.label_smoothing, "label smoothing of the loss",
              CLI::Range(0.0, 1.0));
  app.add_option("--augment", o.augment,
                 "augmentation of the training images: flip (random horizontal flips) or none "
                 "[default: none for mlp, whose dropout is its regularizer; flip for mixer, which "
                 "overfits without it]")
      ->check(CLI::IsMember({"none", "flip"}));
  program.add("--hidden", m.hidden, "mlp: hidden width", CLI::Range(1, 65536));
  program.add("--dropout", m.dropout, "mlp: dropout probability after each hidden layer",
              CLI::Range(0.0, 0.99));
  program.add("--patch", m.patch, "mixer: patch side (divides 28)",
              CLI::IsMember({1, 2, 4, 7, 14, 28}));
  program.add("--width", m.width, "mixer: channels per token", CLI::Range(1, 4096));
  program.add("--blocks", m.blocks, "mixer: number of mixer blocks", CLI::Range(0, 64));
  program.add("--token-hidden", m.token_hidden, "mixer: hidden width of token mixing",
              CLI::Range(1, 4096));
  program.add("--channel-hidden", m.channel_hidden, "mixer: hidden width of channel mixing",
              CLI::Range(1, 16384));
  program.add("--seed", o.train.seed, "seed of the initialization, the shuffle and dropout",
              CLI::NonNegativeNumber);
  program.add_app(o.app, "threads of OpenBLAS and xtgrad's passes (xtgrad::set_num_threads)",
                  "directory of the Fashion-MNIST IDX files");
  program.add("--train-limit", o.train_limit, "use only the first N training images (0: all)",
              CLI::NonNegativeNumber);
  program.add("--test-limit", o.test_limit, "use only the first N test images (0: all)",
              CLI::NonNegativeNumber);
  program.add_save_resume(o.train.save, o.train.resume,
                          "save the run (model, optimizer, schedule, dropout and loop state) to "
                          "DIR after every epoch");
  program.add_stop_after(o.train.stop_after, "epoch", "epochs", 10000);
  program.add_zero(o.train.zero,
                   "0 each process a full AdamW (data-parallel); 1 AdamW's state sharded across "
                   "the processes; 2 the gradients too. The same numbers (to rounding) and --save "
                   "writes the whole state, as in one process.");
  program.add_observer(o.train.observe);
}

}  // namespace

int main(int argc, char** argv) {
  demos::Program program(argc, argv, "train_fashion",
                         "Train a classifier (MLP or MLP-Mixer) on Fashion-MNIST");
  Options o;
  add_options(program, o);
  const auto model_defaults = [&] {  // the defaults that depend on the model
    const bool mixer = o.model.kind == "mixer";
    o.train.flip = o.augment.empty() ? mixer : o.augment == "flip";
    if (program.app.count("--lr") == 0) o.train.lr = mixer ? 2e-3 : 1e-3;
  };
  if (const auto code = program.parse(argc, argv, model_defaults)) return *code;
  return program.run([&] { return run(o, program); });
}
