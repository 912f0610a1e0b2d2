// bench_checkpoint: what activation recomputation (engine/recompute.hpp,
// Sequential::set_recompute_every, GPT::set_recompute_every) saves in
// memory and costs in time:
//
//   build/release/bench/bench_checkpoint [--model mlp] [--tokens 4096 --d 512
//       --hidden 2048 --blocks 16 --steps 4 --dtype float]
//   build/release/bench/bench_checkpoint --model gpt [--layers 8 --embd 512
//       --heads 8 --seq 512 --batch 4 --vocab 8192 --steps 3]
//
// mlp: `blocks` PreNormResidual blocks (LayerNorm, FeedForward with exact
// GELU, dropout 0.1 on the block output) in a Sequential, a loss mean(y^2)
// on x [tokens, d], forward + backward per step (no optimizer).
// gpt: modules/gpt.hpp's GPT<float>, GPT-2 style without dropout, a whole
// training step (forward, cross_entropy over the B * seq logits, backward,
// AdamW step; bench/gpt_xtgrad.cpp), and with -DXTGRAD_BENCH_LIBTORCH=ON the
// same model and step in LibTorch (bench/gpt_libtorch.cpp), which has no
// checkpointing of its own in C++.
//
// Each configuration (plain, checkpoint every 1 and 2 blocks, LibTorch) runs
// in its own child process (fork), so that its peak resident memory is its
// own. Printed per configuration:
//   act. peak   the peak resident memory of forward + backward minus the
//               resident memory once the model and input exist: values kept
//               for backward, gradients, scratch (mlp: over all steps; gpt:
//               over the first step's forward and backward, before any
//               optimizer step)
//   step peak   gpt: the same over whole training steps, AdamW's state
//               included: what training the model needs beyond its weights
//   kept        the bytes the tape holds after the forward (xtgrad)
//   step s      the median time of a step (the first step excluded as warm-up)
// and the ratios: plain's activation peak over this one, this step time over
// plain's, and this step peak over LibTorch's ("-" without LibTorch).
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <xtgrad/engine/engine.hpp>
#include <xtgrad/engine/threads.hpp>
#include <xtgrad/modules/modules.hpp>

#include "attention_cases.hpp"
#include "cases.hpp"  // init_openblas, init_libtorch
#include "harness.hpp"
#include "machine.hpp"

using namespace xtgrad;
using namespace xtgrad::bench;
using Clock = std::chrono::steady_clock;

namespace {

constexpr double k_mib = 1024.0 * 1024.0;
constexpr double k_kib_per_mib = 1024.0;

struct Config {
  std::string model = "mlp";
  int threads = 2;
  int steps = 0;  // 0: 4 for mlp, 3 for gpt
  // mlp
  std::size_t tokens = 4096, d = 512, hidden = 2048, blocks = 16;
  std::string dtype = "float";
  // gpt
  std::size_t layers = 8, embd = 512, heads = 8, seq = 512, batch = 4, vocab = 8192;
};

// What a child process sends back (trivially copyable: it goes through a pipe).
struct Result {
  double act_mib = 0, step_mib = 0, kept_mib = 0, step_s = 0;
};

double max_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // kilobytes on Linux
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Bytes of the values the tape holds (a Parameter's node holds none).
template <class T>
double tape_mib(const Tape<T>& tape) {
  double bytes = 0;
  for (std::size_t i = 0; i < tape.size(); ++i)
    if (tape.node_param(i) == nullptr)
      bytes += static_cast<double>(tape.value(i).size() * sizeof(T));
  return bytes / k_mib;
}

template <class T>
Result run_mlp(const Config& c, std::size_t every) {
  Generator g(1);
  Sequential<T> net;
  PreNormResidualOptions o;
  o.dropout = 0.1;
  for (std::size_t k = 0; k < c.blocks; ++k)
    net.template emplace_back<PreNormResidual<T>>(c.d, c.hidden, o, g);
  net.set_recompute_every(every);
  xt::xarray<T> x = xt::xarray<T>::from_shape({c.tokens, c.d});
  std::mt19937 rng(2);
  std::normal_distribution<double> normal;
  for (T& v : x) v = static_cast<T>(normal(rng));
  const double baseline = max_rss_mib();

  Result r;
  std::vector<double> times;
  Tape<T> tape;
  for (int s = 0; s < c.steps; ++s) {
    tape.clear();
    net.zero_grad();
    const auto t0 = Clock::now();
    const Var<T> loss = mean(square(net(tape.leaf(x, false))));
    if (s == 0) r.kept_mib = tape_mib(tape);
    tape.backward(loss);
    times.push_back(seconds_since(t0));
  }
  std::sort(times.begin() + 1, times.end());
  r.step_s = times.size() > 1 ? times[1 + (times.size() - 1) / 2] : times[0];
  r.act_mib = max_rss_mib() - baseline;
  return r;
}

GptShape gpt_shape(const Config& c) {
  return {"gpt", c.vocab, c.seq, c.layers, c.heads, c.embd, c.batch, c.seq};
}

// One configuration of the GPT: `libtorch`, or xtgrad checkpointing every
// `every` blocks (0: plain).
GptStepParts gpt_parts(const GptShape& shape, std::size_t every, bool libtorch) {
#ifdef XTGRAD_BENCH_LIBTORCH
  if (libtorch) return libtorch_gpt_step_parts(shape);
#endif
  if (libtorch) throw std::logic_error("bench_checkpoint: LibTorch is not built in");
  return xtgrad_gpt_step_parts(shape, every);
}

Result run_gpt(const Config& c, std::size_t every, bool libtorch) {
#ifdef XTGRAD_BENCH_LIBTORCH
  if (libtorch) init_libtorch(c.threads);
#endif
  // A tiny step of the same kind first, so that thread pools and BLAS
  // buffers exist before the baseline (as bench_attention's memory rows).
  const GptStepParts tiny = gpt_parts({"tiny", 32, 8, 1, 1, 8, 1, 8}, every, libtorch);
  tiny.forward_backward();
  tiny.optimizer_step();
  const GptStepParts parts = gpt_parts(gpt_shape(c), every, libtorch);
  const double base = static_cast<double>(resident_kib());

  Result r;
  const auto t0 = Clock::now();
  parts.forward_backward();
  r.act_mib = (static_cast<double>(peak_resident_kib()) - base) / k_kib_per_mib;
  if (parts.kept_bytes) r.kept_mib = parts.kept_bytes() / k_mib;
  parts.optimizer_step();
  const double first = seconds_since(t0);
  std::vector<double> times;
  for (int s = 1; s < c.steps; ++s) {
    const auto t = Clock::now();
    parts.forward_backward();
    parts.optimizer_step();
    times.push_back(seconds_since(t));
  }
  r.step_s = times.empty() ? first : median(times);
  r.step_mib = (static_cast<double>(peak_resident_kib()) - base) / k_kib_per_mib;
  return r;
}

// fn() in a child process, its Result back through a pipe.
// "bench_checkpoint: <compute_info()>" as the measuring children see it
// (their thread count), printed by a child of its own: the parent keeps no
// pool workers, which a fork would not carry over.
void print_machine_line(const Config& c) {
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    init_openblas(c.threads);
    set_num_threads(c.threads);
    std::printf("bench_checkpoint: %s\n", compute_info().c_str());
    std::fflush(stdout);
    _exit(0);
  }
  if (pid > 0) waitpid(pid, nullptr, 0);
}

Result in_child(const Config& c, const std::string& name, const std::function<Result()>& fn) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    init_openblas(c.threads);
    set_num_threads(c.threads);
    const Result r = fn();
    const ssize_t n = write(fds[1], &r, sizeof r);
    _exit(n == static_cast<ssize_t>(sizeof r) ? 0 : 1);
  }
  close(fds[1]);
  Result r;
  const ssize_t n = read(fds[0], &r, sizeof r);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (n != static_cast<ssize_t>(sizeof r) || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw std::runtime_error("the child process of " + name + " failed");
  return r;
}

std::string every_name(std::size_t every) {
  return every == 0 ? "plain" : "checkpoint every " + std::to_string(every);
}

// num / den, or "-" when unknown or not a number (a zero denominator).
void print_ratio(double num, double den, bool known) {
  if (known && den > 0.0)
    std::printf(" %10.2f", num / den);
  else
    std::printf(" %10s", "-");
}

int mlp_table(const Config& c) {
  std::printf("%zu pre-norm FFN blocks, d %zu, hidden %zu, %zu tokens, %s, median of %d steps\n",
              c.blocks, c.d, c.hidden, c.tokens, c.dtype.c_str(), c.steps - 1);
  std::printf("%-22s %14s %14s %10s %10s %10s\n", "", "peak act. MiB", "kept MiB", "step s",
              "memory /", "time x");
  const auto measure = [&](std::size_t every) {
    return in_child(c, every_name(every), [&c, every] {
      return c.dtype == "double" ? run_mlp<double>(c, every) : run_mlp<float>(c, every);
    });
  };
  const Result plain = measure(0);
  for (const std::size_t every : {std::size_t{0}, std::size_t{1}, std::size_t{2}}) {
    const Result r = every == 0 ? plain : measure(every);
    std::printf("%-22s %14.0f %14.0f %10.3f", every_name(every).c_str(), r.act_mib, r.kept_mib,
                r.step_s);
    print_ratio(plain.act_mib, r.act_mib, true);
    print_ratio(r.step_s, plain.step_s, true);
    std::printf("\n");
  }
  return 0;
}

int gpt_table(const Config& c) {
#ifdef XTGRAD_BENCH_LIBTORCH
  const bool libtorch = true;
#else
  const bool libtorch = false;
#endif
  std::printf(
      "GPT L%zu C%zu H%zu T%zu B%zu V%zu (GPT-2 style, no dropout), float, %d threads, "
      "whole training steps (AdamW), median of %d steps\n",
      c.layers, c.embd, c.heads, c.seq, c.batch, c.vocab, c.threads, c.steps - 1);
  std::printf("cpu: %s; load average: %s\n", cpu_model().c_str(), load_average().c_str());
  std::printf("%-20s %14s %14s %10s %9s %10s %10s %10s\n", "", "act. peak MiB", "step peak MiB",
              "kept MiB", "step s", "act. /", "time x", "peak / LT");
  struct Row {
    std::string name;
    Result r;
    bool libtorch;
  };
  std::vector<Row> rows;
  for (const std::size_t every : {std::size_t{0}, std::size_t{1}, std::size_t{2}})
    rows.push_back(
        {every_name(every),
         in_child(c, every_name(every), [&c, every] { return run_gpt(c, every, false); }), false});
  if (libtorch)
    rows.push_back(
        {"LibTorch", in_child(c, "LibTorch", [&c] { return run_gpt(c, 0, true); }), true});
  const Result& plain = rows.front().r;
  const Result* torch = libtorch ? &rows.back().r : nullptr;
  for (const Row& row : rows) {
    std::printf("%-20s %14.0f %14.0f", row.name.c_str(), row.r.act_mib, row.r.step_mib);
    if (row.libtorch)
      std::printf(" %10s", "-");
    else
      std::printf(" %10.0f", row.r.kept_mib);
    std::printf(" %9.3f", row.r.step_s);
    print_ratio(plain.act_mib, row.r.act_mib, !row.libtorch);
    print_ratio(row.r.step_s, plain.step_s, true);
    print_ratio(row.r.step_mib, torch ? torch->step_mib : 0.0, torch != nullptr);
    std::printf("\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  CLI::App app("bench_checkpoint: activation memory and step time with checkpointing");
  app.add_option("--model", c.model, "mlp: a deep residual MLP; gpt: a GPT, whole training steps")
      ->check(CLI::IsMember({"mlp", "gpt"}));
  app.add_option("--threads", c.threads, "OpenBLAS (and LibTorch) threads")
      ->check(CLI::Range(1, 256));
  app.add_option("--steps", c.steps, "steps per configuration (default 4 mlp, 3 gpt)")
      ->check(CLI::Range(2, 1000));
  app.add_option("--tokens", c.tokens, "mlp: rows of x");
  app.add_option("--d", c.d, "mlp: model width");
  app.add_option("--hidden", c.hidden, "mlp: FFN width");
  app.add_option("--blocks", c.blocks, "mlp: residual blocks");
  app.add_option("--dtype", c.dtype, "mlp: float or double")
      ->check(CLI::IsMember({"float", "double"}));
  app.add_option("--layers", c.layers, "gpt: Transformer blocks")->check(CLI::Range(1, 1024));
  app.add_option("--embd", c.embd, "gpt: model width C")->check(CLI::Range(1, 65536));
  app.add_option("--heads", c.heads, "gpt: attention heads (dividing C)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--seq", c.seq, "gpt: sequence length T")->check(CLI::Range(1, 65536));
  app.add_option("--batch", c.batch, "gpt: sequences per step B")->check(CLI::Range(1, 65536));
  app.add_option("--vocab", c.vocab, "gpt: vocabulary size")->check(CLI::Range(1, 1 << 24));
  CLI11_PARSE(app, argc, argv);
  if (c.steps == 0) c.steps = c.model == "gpt" ? 3 : 4;
  if (c.model == "gpt" && c.embd % c.heads != 0) {
    std::fprintf(stderr, "bench_checkpoint: --heads %zu does not divide --embd %zu\n", c.heads,
                 c.embd);
    return 2;
  }
  print_machine_line(c);
  return c.model == "gpt" ? gpt_table(c) : mlp_table(c);
}
