// bench_attention: the speed and memory of xtgrad's attention and GPT against
// the GEMM floor and LibTorch 1.13, side by side in one run (the cases:
// attention_cases.hpp). Every time is a median over interleaved rounds and
// every ratio a median of per-round ratios (harness.hpp): compare ratios
// within one run, not times across runs.
//
//   attention  forward + backward of attention, float32, B*H in {8, 32}
//              (B*H / 8 sequences of 8 heads), T in {256, 1024, 4096},
//              Dh = 64, causal and not, at 1 thread and at --threads;
//              against the GEMM floor and LibTorch's composed attention
//   memory     peak resident memory of one attention forward + backward
//              (B*H = 8, T in {1024, 4096}) and of one GPT training step,
//              xtgrad against LibTorch, each in a fresh child process (this
//              program, re-run with --memory-child): ru_maxrss after the step
//              minus the resident size once the inputs (and model) exist
//   scaling    forward + backward of the fused attention at --threads against
//              itself at 1 thread, interleaved round by round, float32,
//              T = 128, causal: B*H = 8 and 32 at Dh = 64, and the char
//              demo's attention (B = 32, 4 heads, Dh = 32); xt/floor is the
//              time at --threads over the time at 1 thread (its inverse, the
//              speedup, is printed as the row runs)
//   gpt        one GPT training step (forward, cross_entropy, backward,
//              AdamW): the char demo's model (4 layers, 4 heads, C = 128,
//              T = 128, B = 32, vocabulary 96) and one GPT-2-small block
//              (1 layer, 12 heads, C = 768, T = 1024, B = 1, vocabulary 96,
//              so that the block, not the lm_head, is what is timed)
//   precision  the gpt rows' step at bf16 matmul precision against itself
//              at f32 (highest), interleaved round by round in one process,
//              the precision set before every sample; xt/floor is the bf16
//              time over the f32 time (its inverse, the speedup, is printed
//              as the row runs). Skipped, saying so, where this build and
//              CPU have no native bf16 matmul
#include <sys/resource.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include <xtgrad/engine/matmul_precision.hpp>

#include "attention_cases.hpp"
#include "bench_run.hpp"
#include "cases.hpp"  // the LibTorch cases
#include "harness.hpp"
#include "machine.hpp"
#include "report.hpp"

namespace xtgrad::bench {

namespace {

constexpr std::size_t k_heads = 8;  // heads per sequence; B = (B*H) / 8
constexpr std::size_t k_head_dim = 64;
constexpr std::size_t k_memory_batch_heads = 8;
constexpr std::size_t k_vocab = 96;  // a character vocabulary
constexpr double k_kib_per_mib = 1024.0;
constexpr int k_profile_warmup = 3;

const std::vector<std::string> k_sections{"attention", "scaling", "gpt", "precision", "memory"};

// The attention rows run at each of RunOptions::thread_counts.
struct Options : RunOptions {
  std::vector<std::size_t> batch_heads{8, 32};
  std::vector<std::size_t> tokens{256, 1024, 4096};
  std::vector<std::size_t> memory_tokens{1024, 4096};
  std::string memory_child, memory_impl;  // internal: a memory case's name, xtgrad | libtorch
  std::string profile_gpt;                // a gpt row's model: print its step's profile
  int profile_steps = 20;
};

AttentionShape attention_shape(std::size_t batch_heads, std::size_t tokens, bool causal) {
  const std::size_t heads = batch_heads % k_heads == 0 ? k_heads : batch_heads;
  return {batch_heads / heads, heads, tokens, k_head_dim, causal};
}

std::string attention_name(const AttentionShape& s) {
  std::ostringstream name;
  name << "BH=" << s.batch * s.heads << " T=" << s.tokens << (s.causal ? " causal" : " full");
  return name.str();
}

// The char demo's model ("char") and one GPT-2-small block ("block");
// --quick: two tiny ones.
std::vector<GptShape> gpt_shapes(bool quick) {
  if (quick)
    return {{"char", k_vocab, 32, 2, 2, 32, 4, 32}, {"block", k_vocab, 64, 1, 4, 64, 1, 64}};
  return {{"char", k_vocab, 128, 4, 4, 128, 32, 128},
          {"block", k_vocab, 1024, 1, 12, 768, 1, 1024}};
}

std::string gpt_name(const GptShape& s) {
  std::ostringstream name;
  name << s.name << " L" << s.n_layer << " H" << s.n_head << " C" << s.n_embd << " T" << s.tokens
       << " B" << s.batch;
  return name.str();
}

void attention_rows(const Options& o, std::vector<Row>& rows) {
  for (int threads : o.thread_counts) {
    use_threads(o, threads);
    for (std::size_t bh : o.batch_heads)
      for (std::size_t tokens : o.tokens)
        for (bool causal : {false, true}) {
          const AttentionShape shape = attention_shape(bh, tokens, causal);
          Runner libtorch;
#ifdef XTGRAD_BENCH_LIBTORCH
          if (libtorch_on(o)) libtorch = libtorch_attention(shape);
#endif
          const std::string name = attention_name(shape) + " th=" + std::to_string(threads);
          Row row = time_row("attention", name, "ms", 1e-3, xtgrad_attention(shape),
                             attention_floor(shape), libtorch, o.timing);
          const double gflop = attention_flops(shape) * 1e-9;
          std::cerr << "  " << name << ": xtgrad " << gflop / (row.xtgrad * 1e-3)
                    << " GFLOP/s, floor " << gflop / (row.floor * 1e-3) << " GFLOP/s\n";
          rows.push_back(row);
        }
  }
  use_threads(o, o.threads);
}

// The shapes of the scaling rows (see the file comment); --quick: one tiny one.
std::vector<AttentionShape> scaling_shapes(bool quick) {
  if (quick) return {{1, 2, 64, 16, true}};
  return {{1, 8, 128, 64, true}, {4, 8, 128, 64, true}, {32, 4, 128, 32, true}};
}

void scaling_rows(const Options& o, std::vector<Row>& rows) {
  for (const AttentionShape& shape : scaling_shapes(o.quick)) {
    const Runner run = xtgrad_attention(shape);
    // Each sample after its thread count is set and one untimed call, so
    // that the pool's worker exists and has run before the clock starts.
    const auto at = [&](int threads) {
      return Contestant{"th=" + std::to_string(threads), run, [&o, run, threads] {
                          use_threads(o, threads);
                          run();
                        }};
    };
    const std::vector<Timing> t = measure_interleaved({at(o.threads), at(1)}, o.timing);
    std::ostringstream name;
    name << attention_name(shape) << " Dh=" << shape.head_dim << " th=" << o.threads << " / th=1";
    Row row{"scaling", name.str(), "ms"};
    row.xtgrad = t[0].median * 1e3;
    row.floor = t[1].median * 1e3;
    row.xtgrad_over_floor = paired_ratio(t[0], t[1]);
    std::cerr << "  " << row.name << ": speedup " << 1.0 / row.xtgrad_over_floor << "\n";
    rows.push_back(row);
  }
  use_threads(o, o.threads);
}

void gpt_rows(const Options& o, std::vector<Row>& rows) {
  for (const GptShape& shape : gpt_shapes(o.quick)) {
    Runner libtorch;
#ifdef XTGRAD_BENCH_LIBTORCH
    if (libtorch_on(o)) libtorch = libtorch_gpt_step(shape);
#endif
    rows.push_back(time_row("gpt", gpt_name(shape), "ms", 1e-3, xtgrad_gpt_step(shape), {},
                            libtorch, o.timing));
    std::cerr << "  " << gpt_name(shape) << "\n";
  }
}

// Each sample after its precision is set, as scaling_rows sets its thread
// count: one model, one optimizer, the two precisions' steps alternating.
void precision_rows(const Options& o, std::vector<Row>& rows) {
  if (!matmul_precision_supported(MatmulPrecision::bf16)) {
    std::cerr << "  precision: skipped, no native bf16 matmul in this build on this CPU\n";
    return;
  }
  const MatmulPrecision run_precision = get_matmul_precision();
  for (const GptShape& shape : gpt_shapes(o.quick)) {
    const Runner step = xtgrad_gpt_step(shape);
    const auto at = [&step](MatmulPrecision precision) {
      return Contestant{matmul_precision_name(precision), step,
                        [precision] { set_matmul_precision(precision); }};
    };
    const std::vector<Timing> t =
        measure_interleaved({at(MatmulPrecision::bf16), at(MatmulPrecision::highest)}, o.timing);
    Row row{"precision", gpt_name(shape) + " bf16 / f32", "ms"};
    row.xtgrad = t[0].median * 1e3;
    row.floor = t[1].median * 1e3;
    row.xtgrad_over_floor = paired_ratio(t[0], t[1]);
    std::cerr << "  " << row.name << ": speedup " << 1.0 / row.xtgrad_over_floor << "\n";
    rows.push_back(row);
  }
  set_matmul_precision(run_precision);
}

// ---- peak memory ----

// One case of the memory section: an attention forward + backward or a GPT step.
struct MemoryCase {
  std::string name;
  bool gpt = false;
  AttentionShape attention;
  GptShape model;
};

std::vector<MemoryCase> memory_cases(const Options& o) {
  std::vector<MemoryCase> cases;
  for (std::size_t tokens : o.memory_tokens)
    for (bool causal : {false, true}) {
      const AttentionShape shape = attention_shape(k_memory_batch_heads, tokens, causal);
      cases.push_back({"attention " + attention_name(shape), false, shape, {}});
    }
  for (const GptShape& shape : gpt_shapes(o.quick))
    cases.push_back({gpt_name(shape) + " step", true, {}, shape});
  return cases;
}

Runner memory_runner(const MemoryCase& c, const std::string& impl) {
  if (impl == "xtgrad") return c.gpt ? xtgrad_gpt_step(c.model) : xtgrad_attention(c.attention);
#ifdef XTGRAD_BENCH_LIBTORCH
  if (impl == "libtorch")
    return c.gpt ? libtorch_gpt_step(c.model) : libtorch_attention(c.attention);
#endif
  throw std::invalid_argument("bench_attention: unknown implementation '" + impl + "'");
}

long max_resident_kib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;  // KiB on Linux
}

// In the child: one step of the case named o.memory_child; prints
// "<ru_maxrss after the step> <resident KiB once the inputs exist>" (KiB).
int memory_child(const Options& o) {
  for (const MemoryCase& c : memory_cases(o)) {
    if (c.name != o.memory_child) continue;
    // A tiny step of the same kind first, so that thread pools and BLAS
    // buffers exist before the baseline.
    MemoryCase tiny = c;
    tiny.attention.batch = tiny.attention.heads = 1;
    tiny.attention.tokens = 16;
    tiny.model = {"tiny", k_vocab, 8, 1, 1, 8, 1, 8};
    memory_runner(tiny, o.memory_impl)();
    const Runner step = memory_runner(c, o.memory_impl);
    const long base = resident_kib();
    step();
    std::cout << max_resident_kib() << ' ' << base << std::endl;
    return 0;
  }
  throw std::invalid_argument("bench_attention: no memory case named '" + o.memory_child + "'");
}

// Peak minus baseline of one child run, in MiB; NaN when the child failed.
double child_peak_mib(const Options& o, const MemoryCase& c, const char* impl) {
  const std::string exe = self_executable();
  if (exe.empty()) return k_nan;
  std::ostringstream command;
  command << '"' << exe << "\" --threads " << o.threads << (o.quick ? " --quick" : "")
          << " --memory-child \"" << c.name << "\" --memory-impl " << impl;
  for (std::size_t tokens : o.memory_tokens) command << " --memory-tokens " << tokens;
  FILE* pipe = popen(command.str().c_str(), "r");
  if (!pipe) return k_nan;
  long peak = -1, base = -1;
  const int read = std::fscanf(pipe, "%ld %ld", &peak, &base);
  const int status = pclose(pipe);
  if (read != 2 || status != 0 || peak < 0 || base < 0) return k_nan;
  return static_cast<double>(peak - base) / k_kib_per_mib;
}

void memory_rows(const Options& o, std::vector<Row>& rows) {
  for (const MemoryCase& c : memory_cases(o)) {
    Row row{"memory", c.name, "MiB"};
    row.xtgrad = child_peak_mib(o, c, "xtgrad");
    if (libtorch_on(o)) row.libtorch = child_peak_mib(o, c, "libtorch");
    row.xtgrad_over_libtorch = row.xtgrad / row.libtorch;
    rows.push_back(row);
    std::cerr << "  " << row.name << "\n";
  }
}

int run(const Options& o) {
  const Backends backends = init_backends(o);
  if (!o.memory_child.empty()) return memory_child(o);

  if (!o.profile_gpt.empty()) {
    for (const GptShape& shape : gpt_shapes(o.quick)) {
      if (shape.name != o.profile_gpt) continue;
      const int steps = o.quick ? 1 : o.profile_steps;
      std::cout << "xtgrad " << gpt_name(shape) << " training step, " << o.threads << " threads, "
                << steps << " steps after " << k_profile_warmup << " untimed:\n"
                << xtgrad_gpt_profile(shape, k_profile_warmup, steps);
    }
    return 0;
  }

  const Meta meta = describe_run("bench_attention", o, backends);

  std::vector<Row> rows;
  if (wants(o, "attention")) attention_rows(o, rows);
  if (wants(o, "scaling")) scaling_rows(o, rows);
  if (wants(o, "gpt")) gpt_rows(o, rows);
  if (wants(o, "precision")) precision_rows(o, rows);
  if (wants(o, "memory")) memory_rows(o, rows);

  report_run(rows, meta, o,
             "\nxt/floor, LT/floor: time over the GEMM floor (the 2 + 5 products of each head);"
             "\nscaling: xtgrad at --threads against itself at 1 thread (xt/floor: their ratio)."
             "\nprecision: the gpt step at bf16 (xtgrad) against f32 (floor), xt/floor their "
             "ratio."
             "\nxt/LT < 1: xtgrad is faster (or smaller). th = threads.\n");
  return 0;
}

}  // namespace

}  // namespace xtgrad::bench

int main(int argc, char** argv) {
  using namespace xtgrad::bench;
#ifdef XTGRAD_BENCH_LIBTORCH
  reexec_with_passive_omp(argv);  // see machine.hpp; --omp-default keeps libgomp's default
#endif
  Options o;
  RunFlags flags;
  CLI::App app{"bench_attention: xtgrad's attention and GPT against the GEMM floor and LibTorch"};
  add_run_options(app, "bench_attention", argc, argv, o, flags, k_sections,
                  {"smoke run for CI: tiny sizes, two rounds",
                   "thread counts of the attention rows (default: 1 and --threads)",
                   "also write the table and settings as Markdown here",
                   "xtgrad's float GEMMs and fused attention products in f32, or bf16 "
                   "(xtgrad::set_matmul_precision); the floors and LibTorch stay f32"});
  app.add_option("--batch-heads", o.batch_heads, "B*H of the attention rows (8 heads a sequence)")
      ->capture_default_str();
  app.add_option("--tokens", o.tokens, "sequence lengths T of the attention rows")
      ->capture_default_str();
  app.add_option("--memory-tokens", o.memory_tokens, "sequence lengths T of the memory rows")
      ->capture_default_str();
  app.add_option("--min-rounds", o.timing.min_rounds, "at least this many rounds a row")
      ->capture_default_str()
      ->check(CLI::Range(1, 51));
  app.add_option("--profile-gpt", o.profile_gpt,
                 "print the profile (engine/profiler.hpp) of xtgrad's training step of this gpt "
                 "row's model at --threads and exit")
      ->check(CLI::IsMember({"char", "block"}));
  app.add_option("--profile-steps", o.profile_steps, "steps timed by --profile-gpt")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000));
  app.add_option("--memory-child", o.memory_child)->group("");  // internal
  app.add_option("--memory-impl", o.memory_impl)->group("");    // internal
  CLI11_PARSE(app, argc, argv);
  finish_run_options(o, flags);
  // As bench_xtgrad: a pause before each sample only where libgomp's workers spin.
  o.timing.settle_seconds = libtorch_on(o) && !omp_passive() ? 0.01 : 0.0;
  o.timing.warmup = 1;  // one call of a large row is seconds long
  if (o.quick) {
    o.batch_heads = {2};
    o.tokens = {64};
    if (app.count("--memory-tokens") == 0) o.memory_tokens = {128};
    o.timing.min_rounds = 2;
    o.timing.max_rounds = 2;
    o.timing.min_seconds = 0;
    o.timing.min_sample_seconds = 1e-4;
  }
  return exit_status([&] { return run(o); });
}
