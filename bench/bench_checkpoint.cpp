// bench_checkpoint: what activation checkpointing (engine/checkpoint.hpp,
// Sequential::set_checkpoint_every) saves in memory and costs in time, for a
// deep residual MLP:
//
//   build/release/bench/bench_checkpoint [--tokens 4096 --d 512 --hidden 2048
//                                         --blocks 16 --steps 4 --dtype float]
//
// The model: `blocks` PreNormResidual blocks (LayerNorm, FeedForward with
// exact GELU, dropout 0.1 on the block output) in a Sequential, a loss
// mean(y^2) on x [tokens, d]. Each configuration (plain, and checkpoint
// every 1 and 2 blocks) runs in its own child process (fork), so that its
// peak resident memory (getrusage ru_maxrss) is its own: the peak over the
// steps minus the peak once the model and input exist is the activation
// memory (values, gradients, scratch). Also printed: the bytes the tape holds
// after the forward (the values kept for backward) and the median time of a
// training step (forward + backward, the first step excluded as warm-up).
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <xtgrad/engine/engine.hpp>
#include <xtgrad/modules/modules.hpp>

using namespace xtgrad;
using Clock = std::chrono::steady_clock;

namespace {

struct Config {
  std::size_t tokens = 4096, d = 512, hidden = 2048, blocks = 16;
  int steps = 4;
  std::string dtype = "float";
};

struct Result {
  double peak_mib = 0, kept_mib = 0, step_s = 0;
};

double max_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // kilobytes on Linux
}

// Bytes of the values the tape holds (a Parameter's node holds none).
template <class T>
double tape_mib(const Tape<T>& tape) {
  double bytes = 0;
  for (std::size_t i = 0; i < tape.size(); ++i)
    if (tape.node_param(i) == nullptr)
      bytes += static_cast<double>(tape.value(i).size() * sizeof(T));
  return bytes / (1024.0 * 1024.0);
}

template <class T>
Result run(const Config& c, std::size_t every) {
  Generator g(1);
  Sequential<T> net;
  PreNormResidualOptions o;
  o.dropout = 0.1;
  for (std::size_t k = 0; k < c.blocks; ++k)
    net.template emplace_back<PreNormResidual<T>>(c.d, c.hidden, o, g);
  net.set_checkpoint_every(every);
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
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(times.begin() + 1, times.end());
  r.step_s = times.size() > 1 ? times[1 + (times.size() - 1) / 2] : times[0];
  r.peak_mib = max_rss_mib() - baseline;
  return r;
}

// run() in a child process, its Result back through a pipe.
Result in_child(const Config& c, std::size_t every) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    const Result r = c.dtype == "double" ? run<double>(c, every) : run<float>(c, every);
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
    throw std::runtime_error("the child process of checkpoint every " + std::to_string(every) +
                             " failed");
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  CLI::App app("bench_checkpoint: activation memory and step time with checkpointing");
  app.add_option("--tokens", c.tokens);
  app.add_option("--d", c.d);
  app.add_option("--hidden", c.hidden);
  app.add_option("--blocks", c.blocks);
  app.add_option("--steps", c.steps)->check(CLI::Range(2, 1000));
  app.add_option("--dtype", c.dtype)->check(CLI::IsMember({"float", "double"}));
  CLI11_PARSE(app, argc, argv);

  std::printf("%zu pre-norm FFN blocks, d %zu, hidden %zu, %zu tokens, %s, median of %d steps\n",
              c.blocks, c.d, c.hidden, c.tokens, c.dtype.c_str(), c.steps - 1);
  std::printf("%-22s %14s %14s %10s %10s %10s\n", "", "peak act. MiB", "kept MiB", "step s",
              "memory /", "time x");
  const Result plain = in_child(c, 0);
  for (const std::size_t every : {std::size_t{0}, std::size_t{1}, std::size_t{2}}) {
    const Result r = every == 0 ? plain : in_child(c, every);
    const std::string name = every == 0 ? "plain" : "checkpoint every " + std::to_string(every);
    std::printf("%-22s %14.0f %14.0f %10.3f %10.2f %10.2f\n", name.c_str(), r.peak_mib, r.kept_mib,
                r.step_s, plain.peak_mib / r.peak_mib, r.step_s / plain.step_s);
  }
  return 0;
}
