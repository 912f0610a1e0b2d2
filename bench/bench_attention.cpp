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
//   gpt        one GPT training step (forward, cross_entropy, backward,
//              AdamW): the char demo's model (4 layers, 4 heads, C = 128,
//              T = 128, B = 32, vocabulary 96) and one GPT-2-small block
//              (1 layer, 12 heads, C = 768, T = 1024, B = 1, vocabulary 96,
//              so that the block, not the lm_head, is what is timed)
#include <sys/resource.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include <xtgrad/engine/threads.hpp>

#include "attention_cases.hpp"
#include "cases.hpp"  // init_openblas, init_libtorch, libtorch_set_threads
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

struct Options {
  bool quick = false;
  int threads = 2;
  std::vector<int> thread_counts;  // the attention rows run at each (default: 1 and --threads)
  bool libtorch = true;            // when compiled in
  std::vector<std::size_t> batch_heads{8, 32};
  std::vector<std::size_t> tokens{256, 1024, 4096};
  std::vector<std::size_t> memory_tokens{1024, 4096};
  std::vector<std::string> sections{"attention", "memory", "gpt"};
  std::string csv, json, markdown;
  std::string command;
  std::string memory_child, memory_impl;  // internal: a memory case's name, xtgrad | libtorch
  TimingOptions timing;
};

bool wants(const Options& o, const std::string& section) {
  for (const std::string& s : o.sections)
    if (s == section) return true;
  return false;
}

bool libtorch_on(const Options& o) {
#ifdef XTGRAD_BENCH_LIBTORCH
  return o.libtorch;
#else
  (void)o;
  return false;
#endif
}

void use_threads(const Options& o, int threads) {
  set_num_threads(threads);
#ifdef XTGRAD_BENCH_LIBTORCH
  if (libtorch_on(o)) libtorch_set_threads(threads);
#else
  (void)o;
#endif
}

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
  const std::string openblas = init_openblas(o.threads);
  set_num_threads(o.threads);
  std::string libtorch = "off (configure with -DXTGRAD_BENCH_LIBTORCH=ON)";
#ifdef XTGRAD_BENCH_LIBTORCH
  libtorch = o.libtorch ? init_libtorch(o.threads) : "off (--no-libtorch)";
#endif
  if (!o.memory_child.empty()) return memory_child(o);

  const std::string openblas_note = openblas_core_note();
  Meta meta{
      {"command", o.command},
      {"threads", std::to_string(o.threads)},
      {"openblas", openblas},
      {"libtorch", libtorch},
      {"cpu", cpu_model()},
      {"vector_extensions", vector_extensions()},
      {"load_average", load_average()},
      {"dtype", "float32"},
      {"quick", o.quick ? "true" : "false"},
      {"OMP_WAIT_POLICY", omp_wait_policy()},
      {"statistic", "times: median over interleaved rounds; ratios: median of per-round ratios"}};
  std::cout << "bench_attention: " << o.threads << " threads (OpenBLAS and LibTorch), float32\n"
            << "  OpenBLAS: " << openblas << "\n  LibTorch: " << libtorch << " (OMP_WAIT_POLICY "
            << omp_wait_policy() << ")"
            << "\n  CPU: " << cpu_model() << " (" << vector_extensions() << ")"
            << (openblas_note.empty() ? "" : "\n  note: " + openblas_note)
            << "\n  load average at start: " << load_average()
            << (o.quick ? "\n  --quick: smoke run, not a measurement" : "") << "\n";

  std::vector<Row> rows;
  if (wants(o, "attention")) attention_rows(o, rows);
  if (wants(o, "gpt")) gpt_rows(o, rows);
  if (wants(o, "memory")) memory_rows(o, rows);

  print_table(rows, std::cout);
  meta.emplace_back("load_average_at_end", load_average());
  std::cout << "\nload average at end: " << load_average() << '\n'
            << "\nxt/floor, LT/floor: time over the GEMM floor (the 2 + 5 products of each head)."
               "\nxt/LT < 1: xtgrad is faster (or smaller). th = threads.\n";
  if (!o.csv.empty()) write_csv(rows, o.csv);
  if (!o.json.empty()) write_json(rows, meta, o.json);
  if (!o.markdown.empty()) write_markdown(rows, meta, o.markdown);
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
  o.command = "bench_attention";
  for (int i = 1; i < argc; ++i) o.command += std::string(" ") + argv[i];
  CLI::App app{"bench_attention: xtgrad's attention and GPT against the GEMM floor and LibTorch"};
  app.add_flag("--quick", o.quick, "smoke run for CI: tiny sizes, two rounds");
  app.add_option("--threads", o.threads, "OpenBLAS (and LibTorch) threads")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  app.add_option("--thread-counts", o.thread_counts,
                 "thread counts of the attention rows (default: 1 and --threads)")
      ->check(CLI::Range(1, 256));
  app.add_option("--batch-heads", o.batch_heads, "B*H of the attention rows (8 heads a sequence)")
      ->capture_default_str();
  app.add_option("--tokens", o.tokens, "sequence lengths T of the attention rows")
      ->capture_default_str();
  app.add_option("--memory-tokens", o.memory_tokens, "sequence lengths T of the memory rows")
      ->capture_default_str();
  app.add_option("--sections", o.sections, "which of: attention gpt memory")
      ->capture_default_str()
      ->check(CLI::IsMember({"attention", "gpt", "memory"}));
  app.add_option("--csv", o.csv, "also write the table as CSV to this path");
  app.add_option("--json", o.json, "also write the table and the run's settings as JSON here");
  app.add_option("--markdown", o.markdown, "also write the table and settings as Markdown here");
  app.add_option("--min-seconds", o.timing.min_seconds,
                 "measure each contestant of a row for at least this long")
      ->capture_default_str();
  app.add_option("--min-rounds", o.timing.min_rounds, "at least this many rounds a row")
      ->capture_default_str()
      ->check(CLI::Range(1, 51));
  bool omp_default_flag = false;
  app.add_flag("--omp-default", omp_default_flag,
               "keep libgomp's default OMP_WAIT_POLICY (spinning) instead of PASSIVE");
  bool no_libtorch = false;
  app.add_flag("--no-libtorch", no_libtorch, "skip LibTorch even when it is compiled in");
  app.add_option("--memory-child", o.memory_child)->group("");  // internal
  app.add_option("--memory-impl", o.memory_impl)->group("");    // internal
  CLI11_PARSE(app, argc, argv);
  o.libtorch = !no_libtorch;
  // As bench_xtgrad: a pause before each sample only where libgomp's workers spin.
  o.timing.settle_seconds = libtorch_on(o) && !omp_passive() ? 0.01 : 0.0;
  o.timing.warmup = 1;  // one call of a large row is seconds long
  if (o.thread_counts.empty()) {
    o.thread_counts = {1};
    if (o.threads != 1) o.thread_counts.push_back(o.threads);
  }
  if (o.quick) {
    o.batch_heads = {2};
    o.tokens = {64};
    if (app.count("--memory-tokens") == 0) o.memory_tokens = {128};
    o.timing.min_rounds = 2;
    o.timing.max_rounds = 2;
    o.timing.min_seconds = 0;
    o.timing.min_sample_seconds = 1e-4;
  }
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::cerr << e.what() << '\n';
    return 1;
  }
}
