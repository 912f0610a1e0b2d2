// The toy regression of "Attention Is All You Need" section 3.3 as a teaching
// experiment: a position-wise FFN (d_model = 2, d_ff = 16) learns
//   y1 = |x1| + 0.3 x2,   y2 = max(0, x2 - 0.2) - 0.4 x1
// from 128 tokens drawn uniformly from [-1, 1]^2, and is evaluated on 96
// independently drawn held-out tokens. Beside it, the same training on two
// linear layers without an activation: a linear map, which cannot bend |x1|.
//
// Writes to --out (default toy_out/): history.csv, slice.csv, summary.json,
// and loss.png, slice.png rendered by gnuplot. --graph FILE.svg draws the tape
// of one training step; --profile prints where the last steps' time went.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>
#include <xtgrad/engine/engine.hpp>
#include <xtgrad/modules/modules.hpp>
#include <xtgrad/optim/optim.hpp>
#include <xtgrad/training/progress.hpp>
#include <xtgrad/training/run_state.hpp>
#include <xtgrad/training/training_optimizer.hpp>

#include "common/program.hpp"
#include "common/report_files.hpp"

namespace {

using namespace xtgrad;
namespace fs = std::filesystem;

constexpr std::size_t k_train_tokens = 128;
constexpr std::size_t k_heldout_tokens = 96;
constexpr std::size_t k_slice_points = 41;
constexpr std::size_t k_eval_every = 10;  // steps between held-out evaluations

struct Options {
  std::size_t steps = 2000;
  double lr = 1e-2;
  std::string optimizer = "adam";
  std::size_t hidden = 16;
  std::string activation = "relu";
  std::uint64_t seed = 0;
  std::string dtype = "float";
  std::string out = "toy_out";
  std::string save;
  std::string load;
  int threads = 0;  // 0: leave the count as it is (OpenBLAS's default)
  int zero = 0;     // --zero: ZeRO stage under mpirun
  training::StepObserverOptions observe;
};

// The target of the experiment, computed from its equations.
template <class T>
xt::xarray<T> target_of(const xt::xarray<T>& x) {
  xt::xarray<T> y = xt::empty<T>(x.shape());
  for (std::size_t i = 0; i < x.shape()[0]; ++i) {
    const double x1 = x(i, 0), x2 = x(i, 1);
    y(i, 0) = static_cast<T>(std::abs(x1) + 0.3 * x2);
    y(i, 1) = static_cast<T>(std::max(0.0, x2 - 0.2) - 0.4 * x1);
  }
  return y;
}

template <class T>
xt::xarray<T> uniform_tokens(std::size_t n, std::mt19937_64& generator) {
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  xt::xarray<T> x = xt::empty<T>({n, std::size_t{2}});
  for (auto& v : x) v = static_cast<T>(uniform(generator));
  return x;
}

// Two linear layers with nothing in between: the baseline that cannot fit.
template <class T>
class LinearBaseline : public Module<T> {
 public:
  LinearBaseline(std::size_t d_model, std::size_t hidden, Generator& generator)
      : first(d_model, hidden, true, generator), second(hidden, d_model, true, generator) {}
  Var<T> forward(const Var<T>& x) override { return second(first(x)); }
  Linear<T> first, second;

 protected:
  void collect_parameters(const std::string& prefix,
                          typename Module<T>::NamedParameters& out) override {
    this->add_child(prefix, "first", first, out);
    this->add_child(prefix, "second", second, out);
  }
};

// The optimizer of `gradients`' model by --optimizer, sharded with --zero
// 1|2 under mpirun (training/training_optimizer.hpp).
template <class T>
std::unique_ptr<training::TrainingOptimizer<T>> make_optimizer(
    const Options& o, training::Parallel& parallel, training::GradientAverager<T>& gradients,
    std::vector<Parameter<T>*> params) {
  const auto make = [&](auto options) {
    using Group = optim::ParamGroup<T, decltype(options)>;
    return std::make_unique<training::TrainingOptimizer<T>>(
        parallel, gradients, std::vector<Group>{{params, options}}, o.zero);
  };
  if (o.optimizer == "adam") return make(optim::AdamOptions(o.lr));
  if (o.optimizer == "adamw") return make(optim::AdamWOptions(o.lr));
  return make(optim::SGDOptions(o.lr).momentum(0.9));
}

// Mean squared error of a model on (x, y) without recording a backward.
template <class T, class Model>
double evaluate(Model& model, const xt::xarray<T>& x, const xt::xarray<T>& y) {
  Tape<T> tape;
  NoGradGuard<T> no_grad(tape);
  return static_cast<double>(mse(model(tape.leaf(x, false)), tape.leaf(y, false)).value()());
}

struct Record {
  std::size_t step;
  double train_ffn, heldout_ffn, train_baseline, heldout_baseline;
};

// The columns of history.csv.
const training::HistoryFields<Record> k_history_fields{
    {{"step", &Record::step}},
    {{"train_ffn", &Record::train_ffn},
     {"heldout_ffn", &Record::heldout_ffn},
     {"train_baseline", &Record::train_baseline},
     {"heldout_baseline", &Record::heldout_baseline}}};

// Renders loss.png (a training run's) and slice.png from the CSV files with gnuplot.
demos::PlotResult plot(const fs::path& out, bool with_history) {
  return demos::plot(out, "plots.gp", [&](std::ostream& gp) {
    const auto file = [&](const char* name) { return demos::gp_quote((out / name).string()); };
    gp << demos::line_chart("step");
    if (with_history)
      gp << "set output " << file("loss.png") << "\n"
         << "set title 'Toy regression: mean squared error'\n"
         << "set ylabel 'MSE (log scale)'\nset logscale y\nset format y '10^{%L}'\n"
         << "f = " << file("history.csv") << "\n"
         << "plot f using 1:2 with lines lw 2 lc rgb '#1f77b4' title 'FFN train', \\\n"
         << "     f using 1:3 with lines lw 2 dt 2 lc rgb '#1f77b4' title 'FFN held-out', \\\n"
         << "     f using 1:4 with lines lw 2 lc rgb '#d62728' title 'linear baseline train', \\\n"
         << "     f using 1:5 with lines lw 2 dt 2 lc rgb '#d62728' title 'linear baseline "
            "held-out'\n";
    gp << "unset logscale y\nset format y '%g'\n"
       << "set output " << file("slice.png") << "\n"
       << "set title 'Learned y_1 on the slice x_2 = 0'\nset xlabel 'x_1'\nset ylabel 'y_1'\n"
       << "set key top center\n"
       << "s = " << file("slice.csv") << "\n"
       << "plot s using 1:2 with lines lw 3 lc rgb '#7f7f7f' title 'true |x_1|', \\\n"
       << "     s using 1:3 with linespoints lw 2 pt 7 ps 0.6 lc rgb '#1f77b4' title 'FFN'";
    // The baseline is trained only in this run, not in a --load evaluation.
    if (with_history)
      gp << ", \\\n     s using 1:4 with lines lw 2 lc rgb '#d62728' title 'linear baseline'";
    gp << "\n";
  });
}

// The toy's data: training tokens (this rank's slice of them under
// mpirun) and held-out tokens with their targets.
template <class T>
struct ToyData {
  xt::xarray<T> x_train, y_train, x_heldout, y_heldout, x_local, y_local;
};

// Trains both models together, one step each on the same batch; the
// history every k_eval_every steps and the last global training MSE.
template <class T>
std::vector<Record> train_both(const Options& o, training::Parallel& parallel, FeedForward<T>& ffn,
                               LinearBaseline<T>& baseline, const ToyData<T>& d,
                               double& final_train) {
  std::vector<Record> history;
  Tape<T> tape;
  training::GradientAverager<T> ffn_sync(parallel, ffn, tape), base_sync(parallel, baseline, tape);
  auto ffn_opt = make_optimizer<T>(o, parallel, ffn_sync, ffn.parameters());
  auto base_opt = make_optimizer<T>(o, parallel, base_sync, baseline.parameters());
  training::StepObserver<T> observer(o.observe, o.steps);
  training::Progress progress(0, o.steps, o.steps, parallel.out(), "steps/s");
  ParameterNames<T> names;  // both models, as "ffn.w1.weight", "baseline.first.weight"
  for (auto& [name, p] : ffn.named_parameters()) names.emplace_back("ffn." + name, p);
  for (auto& [name, p] : baseline.named_parameters()) names.emplace_back("baseline." + name, p);
  for (std::size_t step = 1; step <= o.steps; ++step) {
    Var<T> ffn_loss, base_loss;
    {
      auto profiled = observer.step(tape, step);
      tape.clear();
      const Var<T> x = tape.leaf(d.x_local, false), y = tape.leaf(d.y_local, false);
      ffn_loss = mse(ffn(x), y);
      base_loss = mse(baseline(x), y);
      tape.backward(ffn_loss);
      tape.backward(base_loss);
      ffn_opt->finish();
      base_opt->finish();
      observer.region("optimizer.step", [&] {
        ffn_opt->step();
        base_opt->step();
        ffn_opt->zero_grad();
        base_opt->zero_grad();
      });
    }
    observer.graph(tape, {ffn_loss, base_loss}, names, step);
    const bool logged = step % k_eval_every == 0 || step == 1 || step == o.steps;
    if (!logged && parallel.active()) continue;  // the global mean is needed only when logged
    // The global batch's MSE: the mean of the ranks' equal shards' means.
    const double train_ffn = parallel.mean(ffn_loss.value()());
    const double train_base = parallel.mean(base_loss.value()());
    final_train = train_ffn;
    if (!logged) continue;
    const std::size_t since = history.empty() ? step : step - history.back().step;
    history.push_back({step, train_ffn, evaluate(ffn, d.x_heldout, d.y_heldout), train_base,
                       evaluate(baseline, d.x_heldout, d.y_heldout)});
    progress.update(step, since, train_ffn);
  }
  progress.finish();
  if (!parallel.quiet()) observer.report(std::cout);
  return history;
}

// slice.csv, history.csv, summary.json and the pictures; the printed summary.
template <class T>
int report(const Options& o, const fs::path& out, FeedForward<T>& ffn, LinearBaseline<T>& baseline,
           const ToyData<T>& d, const std::vector<Record>& history, double final_train,
           double seconds) {
  const bool trained_here = o.load.empty();
  // The learned slice at x2 = 0, where y1 = |x1|.
  xt::xarray<T> slice_x = xt::zeros<T>({k_slice_points, std::size_t{2}});
  for (std::size_t i = 0; i < k_slice_points; ++i)
    slice_x(i, 0) = static_cast<T>(-1.0 + 2.0 * i / (k_slice_points - 1));
  const xt::xarray<T> slice_ffn = ffn.infer(slice_x), slice_base = baseline.infer(slice_x);
  double slice_error = 0.0;
  std::ostringstream slice_csv;
  slice_csv << "x1,true_y1,ffn_y1,baseline_y1\n" << std::setprecision(9);
  for (std::size_t i = 0; i < k_slice_points; ++i) {
    const double x1 = slice_x(i, 0);
    slice_error = std::max(slice_error, std::abs(double(slice_ffn(i, 0)) - std::abs(x1)));
    slice_csv << x1 << ',' << std::abs(x1) << ',' << slice_ffn(i, 0) << ',' << slice_base(i, 0)
              << '\n';
  }
  training::write_text_file(out / "slice.csv", slice_csv.str());
  training::write_history_csv(out / "history.csv", history, k_history_fields);

  const double heldout_ffn = evaluate(ffn, d.x_heldout, d.y_heldout);
  const double heldout_base = evaluate(baseline, d.x_heldout, d.y_heldout);
  // With --load only the FFN exists; the untrained baseline is not reported.
  const auto baseline_number = [trained_here](double v) {
    std::ostringstream s;
    s << std::setprecision(9) << v;
    return trained_here ? s.str() : "null";
  };
  const std::string base = baseline_number(heldout_base),
                    ratio = baseline_number(heldout_base / heldout_ffn);
  demos::write_summary_json(out / "summary.json",
                            {{"steps", trained_here ? o.steps : 0},
                             {"optimizer", o.optimizer},
                             {"lr", o.lr},
                             {"activation", o.activation},
                             {"hidden", o.hidden},
                             {"seed", o.seed},
                             {"dtype", o.dtype},
                             {"final_train_mse", final_train},
                             {"heldout_mse_ffn", heldout_ffn},
                             {"heldout_mse_linear_baseline", nlohmann::json::parse(base)},
                             {"baseline_over_ffn", nlohmann::json::parse(ratio)},
                             {"slice_max_abs_error", slice_error},
                             {"wall_seconds", seconds}});
  std::cout << "final train MSE        " << final_train << "\n"
            << "held-out MSE, FFN      " << heldout_ffn << "\n"
            << "held-out MSE, linear   " << base << "  (" << ratio << "x the FFN's)\n"
            << "slice x2=0, max |y1 - |x1||  " << slice_error << "\n"
            << "wall time              " << seconds << " s\n";
  const std::string pictures = trained_here ? "loss.png, slice.png" : "slice.png";
  return demos::print_wrote(out, "summary.json, history.csv, slice.csv", plot(out, trained_here),
                            pictures, "pictures");
}

template <class T>
int run(const Options& o, demos::Program& program) {
  training::Parallel& parallel = program.parallel;
  std::mt19937_64 data_generator(o.seed);
  ToyData<T> d;
  d.x_train = uniform_tokens<T>(k_train_tokens, data_generator);
  d.x_heldout = uniform_tokens<T>(k_heldout_tokens, data_generator);
  d.y_train = target_of(d.x_train);
  d.y_heldout = target_of(d.x_heldout);
  Generator init_generator(o.seed + 1);
  FeedForward<T> ffn(2, o.hidden, parse_activation(o.activation), init_generator);
  LinearBaseline<T> baseline(2, o.hidden, init_generator);
  // Under mpirun each rank trains on its slice of the training tokens and
  // the gradients are averaged (training::GradientAverager): the same steps as
  // one process on all of them. Rank 0 alone prints and writes.
  const auto [first, count] = parallel.slice(k_train_tokens, "the training batch");
  d.x_local = xt::view(d.x_train, xt::range(first, first + count));
  d.y_local = xt::view(d.y_train, xt::range(first, first + count));
  const fs::path out(o.out);
  if (!parallel.quiet()) fs::create_directories(out);

  std::vector<Record> history;
  const double start = program.seconds();
  double final_train = 0.0;
  if (!o.load.empty()) {
    ffn.load(o.load);
    final_train = evaluate(ffn, d.x_train, d.y_train);
  } else {
    history = train_both(o, parallel, ffn, baseline, d, final_train);
    if (!o.save.empty() && !parallel.quiet()) ffn.save(o.save);
  }
  if (parallel.quiet()) return 0;
  return report(o, out, ffn, baseline, d, history, final_train, program.seconds() - start);
}

void add_options(demos::Program& program, Options& o) {
  CLI::App& app = program.app;
  program.add("--steps", o.steps, "training steps", CLI::Range(1, 100000000));
  program.add("--lr", o.lr, "learning rate", CLI::PositiveNumber);
  program.add("--optimizer", o.optimizer, "adam, adamw or sgd (momentum 0.9)",
              CLI::IsMember({"adam", "adamw", "sgd"}));
  program.add("--hidden", o.hidden, "hidden width d_ff", CLI::Range(1, 4096));
  program.add("--activation", o.activation, "relu, gelu, gelu_tanh, gelu_sigmoid or silu",
              CLI::IsMember({"relu", "gelu", "gelu_tanh", "gelu_sigmoid", "silu"}));
  program.add("--seed", o.seed, "seed of the data and the initialization", CLI::NonNegativeNumber);
  program.add("--dtype", o.dtype, "float or double", CLI::IsMember({"float", "double"}));
  program.add_out(o.out);
  app.add_option("--save", o.save, "write the trained FFN as a checkpoint directory");
  app.add_option("--load", o.load, "evaluate a saved FFN instead of training")
      ->check(CLI::ExistingDirectory);
  app.add_option("--threads", o.threads,
                 "threads of OpenBLAS and xtgrad's passes (xtgrad::set_num_threads); default: "
                 "OpenBLAS's own count")
      ->check(CLI::Range(1, 256));
  program.add_zero(o.zero,
                   "0 each process a full optimizer (data-parallel); 1 the optimizer's state "
                   "sharded across the processes; 2 the gradients too. The same numbers, to "
                   "rounding.");
  program.add_observer(o.observe);
}

}  // namespace

int main(int argc, char** argv) {
  demos::Program program(argc, argv, "train_toy",
                         "Train a position-wise FFN on the toy regression of AIAYN section 3.3");
  Options o;
  add_options(program, o);
  if (const auto code = program.parse(argc, argv)) return *code;
  return program.run(
      [&] {
        if (o.threads > 0) xtgrad::set_num_threads(o.threads);
        program.start_compute("f32");
        return o.dtype == "float" ? run<float>(o, program) : run<double>(o, program);
      },
      /*bad_input_exits_2=*/false);
}
