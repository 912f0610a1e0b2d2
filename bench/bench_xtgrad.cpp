// bench_xtgrad: the speed of xtgrad against its floors and against LibTorch,
// side by side in one run. Prints a table and optionally writes it
// as CSV and JSON. Every figure is a median over interleaved rounds (see
// harness.hpp); compare ratios within one run, not times across runs.
//
//   ffn         forward and forward+backward of the three FFN families at
//               D = 512, H = 2048, N in {128, 1024, 4096}, against the GEMM floor
//   small       inference (Module::infer) and recorded forward of the three
//               FFN families at N in {1, 2, 4, 8}, against the roofline: one
//               read of the weights with N multiply-adds per weight
//               (roofline_floor)
//   matmul      batched matmul forward and forward+backward, [32, 128, 64] .
//               [32, 64, 128] and [8, 512, 512] . [8, 512, 512], against its GEMMs
//   toy         one training step of the toy model, microseconds
//   activation  each activation over 4M floats, forward and backward, against a copy
//   rowwise     layer_norm, rms_norm, softmax, log_softmax, cross_entropy over
//               [8192, 1024], forward and forward+backward, against a copy of
//               the bytes each must move (cases.hpp, rowwise_floor)
//   fashion     one epoch of training of each train_fashion model (mlp, mixer):
//               seconds per epoch = the median time of one training step at
//               batch 128 (cases.hpp, FashionModel) times 469, the steps of
//               an epoch over 60,000 images, xtgrad against LibTorch
//   memory      peak resident memory of one forward+backward at N = 4096, each
//               measured in a fresh child process (this program, re-run with
//               --peak-memory-child) so that earlier cases do not count

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench_run.hpp"
#include "cases.hpp"
#include "harness.hpp"
#include "machine.hpp"
#include "report.hpp"

namespace xtgrad::bench {

namespace {

constexpr std::size_t k_activation_floats = std::size_t(1) << 22;  // 4M
constexpr std::size_t k_quick_activation_floats = std::size_t(1) << 20;
constexpr std::size_t k_memory_tokens = 4096;
constexpr std::size_t k_quick_tokens = 128;
constexpr double k_kib_per_mib = 1024.0;

const MatmulShape k_matmul_shapes[] = {{32, 128, 64, 128}, {8, 512, 512, 512}};

const RowOp k_row_ops[] = {RowOp::layer_norm, RowOp::rms_norm, RowOp::softmax, RowOp::log_softmax,
                           RowOp::cross_entropy};
constexpr std::size_t k_quick_rows = 512;

constexpr int k_fashion_profile_warmup = 5;
constexpr int k_fashion_profile_steps = 50;
const FashionModel k_fashion_models[] = {FashionModel::mlp, FashionModel::mixer};

const Family k_families[] = {Family::relu, Family::gelu, Family::swiglu};
const Activation k_activations[] = {Activation::relu, Activation::gelu, Activation::gelu_tanh,
                                    Activation::gelu_sigmoid, Activation::silu};

const std::vector<std::string> k_sections{"ffn",        "small",   "matmul",  "toy",
                                          "activation", "rowwise", "fashion", "memory"};

// The ffn and small sections run at each of RunOptions::thread_counts.
struct Options : RunOptions {
  std::vector<std::size_t> tokens{128, 1024, 4096};
  std::vector<std::size_t> small_tokens{1, 2, 4, 8};
  std::string profile_fashion;    // a model: print its step's profile, measure nothing
  std::string peak_memory_child;  // internal: "family:tokens:impl"
};

Family parse_family(const std::string& name) {
  for (Family f : k_families)
    if (name == family_name(f)) return f;
  throw std::invalid_argument("bench_xtgrad: unknown FFN family '" + name +
                              "' (relu, gelu, swiglu)");
}

// The FFN rows at N = o.tokens (ffn: against the GEMMs) or o.small_tokens
// (small: against the roofline of N rows), at each thread count.
void ffn_rows(const Options& o, const std::string& section, std::vector<Row>& rows) {
  const bool small = section == "small";
  const std::vector<Pass> passes = small ? std::vector<Pass>{Pass::inference, Pass::forward}
                                         : std::vector<Pass>{Pass::forward, Pass::forward_backward};
  for (int threads : o.thread_counts) {
    use_threads(o, threads);
    for (Family family : k_families)
      for (std::size_t tokens : small ? o.small_tokens : o.tokens)
        for (Pass pass : passes) {
          const FfnShape shape{tokens};
          Runner libtorch;
#ifdef XTGRAD_BENCH_LIBTORCH
          if (libtorch_on(o)) libtorch = libtorch_ffn(family, pass, shape);
#endif
          std::ostringstream name;
          name << family_name(family) << " N=" << tokens << ' ' << pass_name(pass)
               << " T=" << threads;
          rows.push_back(
              time_row(section, name.str(), "ms", 1e-3, xtgrad_ffn(family, pass, shape),
                       small ? roofline_floor(family, shape) : gemm_floor(family, pass, shape),
                       libtorch, o.timing));
          std::cerr << "  " << name.str() << "\n";
        }
  }
  use_threads(o, o.threads);
}

void matmul_rows(const Options& o, std::vector<Row>& rows) {
  for (const MatmulShape& s : k_matmul_shapes)
    for (Pass pass : {Pass::forward, Pass::forward_backward}) {
      std::ostringstream name;
      name << s.batch << 'x' << s.m << 'x' << s.k << " . " << s.batch << 'x' << s.k << 'x' << s.n
           << ' ' << pass_name(pass);
      rows.push_back(time_row("matmul", name.str(), "ms", 1e-3, xtgrad_matmul(pass, s),
                              matmul_floor(pass, s), {}, o.timing));
      std::cerr << "  " << name.str() << "\n";
    }
}

void toy_rows(const Options& o, std::vector<Row>& rows) {
  Runner libtorch;
#ifdef XTGRAD_BENCH_LIBTORCH
  if (libtorch_on(o)) libtorch = libtorch_toy_step();
#endif
  rows.push_back(time_row("toy", "train step N=128 D=2 H=16 (Adam)", "us", 1e-6, xtgrad_toy_step(),
                          {}, libtorch, o.timing));
}

void activation_rows(const Options& o, std::vector<Row>& rows) {
  const std::size_t n = o.quick ? k_quick_activation_floats : k_activation_floats;
  for (Activation a : k_activations)
    for (Pass pass : {Pass::forward, Pass::forward_backward}) {
      Runner libtorch;
#ifdef XTGRAD_BENCH_LIBTORCH
      if (libtorch_on(o)) libtorch = libtorch_activation(a, pass, n);
#endif
      std::ostringstream name;
      name << to_string(a) << ' ' << (pass == Pass::forward ? "fwd" : "bwd")
           << " n=" << n / (1 << 20) << "M";
      rows.push_back(time_row("activation", name.str(), "ms", 1e-3, xtgrad_activation(a, pass, n),
                              copy_floor(n), libtorch, o.timing));
    }
}

void rowwise_rows(const Options& o, std::vector<Row>& rows) {
  RowShape shape;
  if (o.quick) shape.rows = k_quick_rows;
  for (RowOp op : k_row_ops)
    for (Pass pass : {Pass::forward, Pass::forward_backward}) {
      Runner libtorch;
#ifdef XTGRAD_BENCH_LIBTORCH
      if (libtorch_on(o)) libtorch = libtorch_rowwise(op, pass, shape);
#endif
      std::ostringstream name;
      name << row_op_name(op) << ' ' << shape.rows << 'x' << shape.cols << ' ' << pass_name(pass);
      rows.push_back(time_row("rowwise", name.str(), "ms", 1e-3, xtgrad_rowwise(op, pass, shape),
                              rowwise_floor(op, pass, shape), libtorch, o.timing));
      std::cerr << "  " << name.str() << "\n";
    }
}

void fashion_rows(const Options& o, std::vector<Row>& rows) {
  for (FashionModel model : k_fashion_models) {
    Runner libtorch;
#ifdef XTGRAD_BENCH_LIBTORCH
    if (libtorch_on(o)) libtorch = libtorch_fashion_step(model);
#endif
    std::ostringstream name;
    name << fashion_model_name(model) << " epoch (" << k_fashion_steps_per_epoch
         << " x B=" << k_fashion_batch << ')';
    rows.push_back(time_row("fashion", name.str(), "s/epoch",
                            1.0 / static_cast<double>(k_fashion_steps_per_epoch),
                            xtgrad_fashion_step(model), {}, libtorch, o.timing));
    std::cerr << "  " << name.str() << "\n";
  }
}

// ---- peak memory ----

// In the child: one forward+backward of `spec` ("family:tokens:impl"); prints
// "<peak KiB during the step> <resident KiB before the model was built>".
int peak_memory_child(const Options& o) {
  const std::size_t first = o.peak_memory_child.find(':');
  const std::size_t second = o.peak_memory_child.find(':', first + 1);
  if (first == std::string::npos || second == std::string::npos)
    throw std::invalid_argument("bench_xtgrad: --peak-memory-child wants family:tokens:impl");
  const Family family = parse_family(o.peak_memory_child.substr(0, first));
  const std::size_t tokens = std::stoul(o.peak_memory_child.substr(first + 1, second - first - 1));
  const std::string impl = o.peak_memory_child.substr(second + 1);
  const FfnShape tiny{8, 8, 16};
  Runner (*factory)(Family, Pass, FfnShape) = nullptr;
  if (impl == "xtgrad") factory = xtgrad_ffn;
#ifdef XTGRAD_BENCH_LIBTORCH
  if (impl == "libtorch") factory = libtorch_ffn;
#endif
  if (!factory) throw std::invalid_argument("bench_xtgrad: unknown implementation '" + impl + "'");
  // A tiny step first, so that thread pools and BLAS buffers exist before the baseline.
  factory(family, Pass::forward_backward, tiny)();
  std::ofstream("/proc/self/clear_refs") << "5";  // reset VmHWM (Linux >= 4.0); best effort
  const long base = resident_kib();
  Runner step = factory(family, Pass::forward_backward, FfnShape{tokens});
  step();
  std::cout << peak_resident_kib() << ' ' << base << std::endl;
  return 0;
}

// Peak minus baseline of one child run, in MiB; NaN when the child failed.
double child_peak_mib(const Options& o, Family family, std::size_t tokens, const char* impl) {
  const std::string exe = self_executable();
  if (exe.empty()) return k_nan;
  std::ostringstream command;
  command << '"' << exe << "\" --threads " << o.threads << " --peak-memory-child "
          << family_name(family) << ':' << tokens << ':' << impl;
  FILE* pipe = popen(command.str().c_str(), "r");
  if (!pipe) return k_nan;
  long peak = -1, base = -1;
  const int read = std::fscanf(pipe, "%ld %ld", &peak, &base);
  const int status = pclose(pipe);
  if (read != 2 || status != 0 || peak < 0 || base < 0) return k_nan;
  return static_cast<double>(peak - base) / k_kib_per_mib;
}

void memory_rows(const Options& o, std::vector<Row>& rows) {
  const std::size_t tokens = o.quick ? k_quick_tokens : k_memory_tokens;
  for (Family family : k_families) {
    Row row{"memory",
            std::string(family_name(family)) + " N=" + std::to_string(tokens) + " fwd+bwd peak",
            "MiB"};
    row.xtgrad = child_peak_mib(o, family, tokens, "xtgrad");
    if (libtorch_on(o)) row.libtorch = child_peak_mib(o, family, tokens, "libtorch");
    row.xtgrad_over_libtorch = row.xtgrad / row.libtorch;
    rows.push_back(row);
  }
}

int run(const Options& o) {
  const Backends backends = init_backends(o);
  if (!o.peak_memory_child.empty()) return peak_memory_child(o);
  if (!o.profile_fashion.empty()) {
    const FashionModel model = o.profile_fashion == "mlp" ? FashionModel::mlp : FashionModel::mixer;
    const int steps = o.quick ? 1 : k_fashion_profile_steps;
    std::cout << "xtgrad " << o.profile_fashion << " training step, B = " << k_fashion_batch << ", "
              << o.threads << " threads (OpenBLAS " << backends.openblas << "), " << steps
              << " steps after " << k_fashion_profile_warmup << " untimed:\n"
              << xtgrad_fashion_profile(model, k_fashion_profile_warmup, steps);
    return 0;
  }

  const Meta meta = describe_run("bench_xtgrad", o, backends);

  std::vector<Row> rows;
  if (wants(o, "ffn")) ffn_rows(o, "ffn", rows);
  if (wants(o, "small")) ffn_rows(o, "small", rows);
  if (wants(o, "matmul")) matmul_rows(o, rows);
  if (wants(o, "toy")) toy_rows(o, rows);
  if (wants(o, "activation")) activation_rows(o, rows);
  if (wants(o, "rowwise")) rowwise_rows(o, rows);
  if (wants(o, "fashion")) fashion_rows(o, rows);
  if (wants(o, "memory")) memory_rows(o, rows);

  report_run(rows, meta, o,
             "\nxt/floor, LT/floor: time over the floor (the GEMMs alone; a copy of the same "
             "size).\nxt/LT < 1: xtgrad is faster (or smaller). Activation bwd for xtgrad is the "
             "backward kernel.\n");
  return 0;
}

}  // namespace

const char* family_name(Family family) {
  switch (family) {
    case Family::relu:
      return "relu";
    case Family::gelu:
      return "gelu";
    case Family::swiglu:
      return "swiglu";
  }
  return "?";
}

const char* row_op_name(RowOp op) {
  switch (op) {
    case RowOp::layer_norm:
      return "layer_norm";
    case RowOp::rms_norm:
      return "rms_norm";
    case RowOp::softmax:
      return "softmax";
    case RowOp::log_softmax:
      return "log_softmax";
    case RowOp::cross_entropy:
      return "cross_entropy";
  }
  return "?";
}

const char* fashion_model_name(FashionModel model) {
  return model == FashionModel::mlp ? "mlp" : "mixer";
}

const char* pass_name(Pass pass) {
  return pass == Pass::forward ? "fwd" : pass == Pass::inference ? "infer" : "fwd+bwd";
}

}  // namespace xtgrad::bench

int main(int argc, char** argv) {
  using namespace xtgrad::bench;
#ifdef XTGRAD_BENCH_LIBTORCH
  reexec_with_passive_omp(argv);  // see machine.hpp; --omp-default keeps libgomp's default
#endif
  Options o;
  RunFlags flags;
  CLI::App app{"bench_xtgrad: xtgrad against the GEMM and copy floors and LibTorch"};
  add_run_options(app, "bench_xtgrad", argc, argv, o, flags, k_sections,
                  {"smoke run for CI: N = 128 only, 1M floats, two rounds",
                   "thread counts of the ffn and small sections (default: 1 and --threads)",
                   "also write the table and the run's settings as Markdown here (the block "
                   "of docs/benchmarks.md: bench/update_results.cmake)",
                   "xtgrad's float GEMMs in f32, or bf16 (xtgrad::set_matmul_precision); the "
                   "floors and LibTorch stay f32"});
  app.add_option("--tokens", o.tokens, "FFN token counts N")->capture_default_str();
  app.add_option("--small-tokens", o.small_tokens, "token counts N of the small section")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t(1), k_roofline_rows));
  app.add_option("--settle-seconds", o.timing.settle_seconds,
                 "idle pause before every sample, to let LibTorch's spinning OpenMP workers "
                 "sleep (default: 0.01 with --omp-default or another OMP_WAIT_POLICY than "
                 "PASSIVE, else 0)");
  app.add_option("--profile-fashion", o.profile_fashion,
                 "print the profile (engine/profiler.hpp) of xtgrad's training step of this "
                 "fashion model and exit")
      ->check(CLI::IsMember({"mlp", "mixer"}));
  app.add_option("--peak-memory-child", o.peak_memory_child)->group("");  // internal
  CLI11_PARSE(app, argc, argv);
  finish_run_options(o, flags);
  // The pause is for libgomp's workers, which spin after each of LibTorch's
  // parallel regions unless OMP_WAIT_POLICY is PASSIVE. Where none spin it
  // only costs: on this 2-core VM a core left idle for 1 ms or more often
  // took milliseconds to run a woken thread again, so that the sample after
  // a pause ran on one core (exact GELU over 4M floats at two threads: 3.3 ms
  // after a 10 ms pause, as on one thread; 1.75 ms without it).
  if (app.count("--settle-seconds") == 0 && !(libtorch_on(o) && !omp_passive()))
    o.timing.settle_seconds = 0;
  if (o.quick) {
    o.tokens = {k_quick_tokens};
    o.small_tokens = {1, 8};
    o.timing.warmup = 1;
    o.timing.min_rounds = 2;
    o.timing.max_rounds = 2;
    o.timing.min_seconds = 0;
    o.timing.min_sample_seconds = 1e-4;
    o.timing.settle_seconds = 0;
  }
  return exit_status([&] { return run(o); });
}
