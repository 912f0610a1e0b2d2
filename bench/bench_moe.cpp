// bench_moe: one mixture-of-experts layer (modules/moe.hpp, SparseMoe with
// SwiGLU experts), forward and backward, against its floor:
//
//   build/release/bench/bench_moe [--tokens 4096 --c 512 --experts 8 --k 2
//                                  --hidden 1024 --threads 1 --inputs 1]
//   build/release/bench/bench_moe --demo     (train_gpt's MoE layer: 1024
//       tokens, C 64, 4 experts, k 1, hidden 170, tanh GELU, 4 inputs)
//
// xtgrad: SparseMoe::forward on a warm tape (cleared, not released, between
// calls), then tape.backward(y, dy): the router, softmax, top-k, the fused
// experts op and every gradient. The floor: the same per-expert GEMMs (three
// forward, six backward, over the same expert row counts as xtgrad's routing)
// through the GEMM entry point (engine/kernels/gemm.hpp) on buffers
// allocated once, and nothing else. With -DXTGRAD_BENCH_LIBTORCH=ON, also
// LibTorch 1.13 running Hugging Face's MixtralSparseMoeBlock as transformers
// writes it (bench/moe_libtorch.hpp). Times are medians over interleaved
// rounds (bench/harness.hpp); the ratios are medians of the per-round ratios.
// --inputs R cycles xtgrad and LibTorch through R inputs, so that the
// routing (each expert's row count) changes from call to call as in
// training; the floor keeps the first input's row counts (a product's shape
// that changes costs oneDNN a new primitive: a floor's shapes stay cached). Peak memory: each contestant built in a child process,
// then three steps; the peak resident memory above what it held once built
// (its parameters and inputs).
//
// Expert parallelism (built with distributed/), under mpirun:
//
//   OPENBLAS_NUM_THREADS=1 mpirun -np 2 build/release/bench/bench_moe --expert-parallel
//
// at a fixed global batch of --tokens, each round times in turn (medians
// over --rounds): 1 rank, rank 0 alone with every expert on all tokens (the
// others wait), and P ranks, each on tokens / P with its E / P experts
// (distributed::shard_experts: the router's softmax and top-k on its own
// tokens, the all-to-alls, the router's gradient averaged); prints tokens/s
// of both and their ratio.
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <xtgrad/engine/engine.hpp>
#include <xtgrad/engine/kernels/gemm.hpp>
#include <xtgrad/modules/moe.hpp>

#if XTGRAD_HAVE_MPI
#include <algorithm>
#include <chrono>
#include <thread>

#include <xtensor/xview.hpp>
#include <xtgrad/distributed/distributed.hpp>
#endif

#include "cases.hpp"
#include "harness.hpp"
#include "machine.hpp"
#include "moe_libtorch.hpp"

using namespace xtgrad;
using namespace xtgrad::bench;

namespace {

struct Config {
  std::size_t tokens = 4096, c = 512, experts = 8, k = 2, hidden = 1024, inputs = 1;
  Activation activation = Activation::silu;
  int threads = 1;
  bool quick = false;
  bool expert_parallel = false;
  int rounds = 5;
};

xt::xarray<float> uniform(const Shape& shape, std::mt19937& generator, float scale) {
  std::uniform_real_distribution<float> u(-scale, scale);
  xt::xarray<float> out = xt::empty<float>(shape);
  for (float& e : out) e = u(generator);
  return out;
}

// xtgrad's contestant: the layer, a warm tape, the inputs x and dy.
struct XtgradMoe {
  SparseMoe<float> layer;
  std::vector<xt::xarray<float>> x;
  xt::xarray<float> dy;
  Tape<float> tape;
  std::size_t call = 0;

  XtgradMoe(const Config& c, std::mt19937& generator) : layer(c.c, c.hidden, options(c)) {
    x.push_back(uniform({c.tokens, c.c}, generator, 1.0f));
    dy = uniform({c.tokens, c.c}, generator, 1.0f);
    for (std::size_t i = 1; i < c.inputs; ++i)
      x.push_back(uniform({c.tokens, c.c}, generator, 1.0f));
  }

  static SparseMoeOptions options(const Config& c) {
    SparseMoeOptions o;
    o.num_experts = c.experts;
    o.top_k = c.k;
    o.activation = c.activation;
    return o;
  }

  void run() {
    tape.clear();
    const Var<float> y = layer(tape.leaf(x[call++ % x.size()]));
    tape.backward(y, dy);
  }
};

#ifdef XTGRAD_BENCH_LIBTORCH
std::function<void()> libtorch_contestant(const Config& c) {
  std::mt19937 generator(20261205);
  const XtgradMoe data(c, generator);  // the same inputs
  std::vector<std::vector<float>> inputs;
  for (const xt::xarray<float>& x : data.x) inputs.emplace_back(x.begin(), x.end());
  return libtorch_moe_step(
      {c.tokens, c.c, c.experts, c.k, c.hidden, c.activation == Activation::gelu_tanh}, inputs,
      std::vector<float>(data.dy.begin(), data.dy.end()));
}
#endif

// The peak resident memory of three calls of the contestant build() returns,
// built in a child process, above the resident memory once it is built, in
// MiB (-1 when the child failed).
double peak_mib_in_child(const Config& c, bool libtorch,
                         const std::function<std::function<void()>()>& build) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    init_openblas(c.threads);
    set_num_threads(c.threads);
#ifdef XTGRAD_BENCH_LIBTORCH
    if (libtorch) init_libtorch(c.threads);
#endif
    (void)libtorch;
    const std::function<void()> step = build();
    std::ofstream("/proc/self/clear_refs") << "5";  // the peak from here on
    const long base = resident_kib();
    for (int i = 0; i < 3; ++i) step();
    const double mib = static_cast<double>(peak_resident_kib() - base) / 1024.0;
    const ssize_t n = write(fds[1], &mib, sizeof mib);
    _exit(n == static_cast<ssize_t>(sizeof mib) ? 0 : 1);
  }
  close(fds[1]);
  double mib = -1;
  if (read(fds[0], &mib, sizeof mib) != static_cast<ssize_t>(sizeof mib)) mib = -1;
  close(fds[0]);
  int status = 0;
  if (pid > 0) waitpid(pid, &status, 0);
  return pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? mib : -1;
}

// The floor: per expert e with n_e rows, [n_e, C] x_e, weights W1, W3 [H, C], W2 [C, H]:
//   g = x_e W1^T, u = x_e W3^T, o = a W2^T                          (forward)
//   da = do W2, dW2 = do^T a, dW1 = dg^T x_e, dW3 = du^T x_e,
//   dx_e = dg W1 + du W3                                            (backward)
struct FloorMoe {
  std::size_t c, h;
  std::vector<std::size_t> rows;  // n_e
  std::vector<float> x, g, u, a, o, d_out, da, dg, du, dxe, w1, w3, w2, dw1, dw3, dw2;

  FloorMoe(const Config& cf, std::vector<std::size_t> counts)
      : c(cf.c), h(cf.hidden), rows(counts) {
    std::size_t n = 0;
    for (std::size_t r : rows) n += r;
    for (auto* b : {&x, &o, &d_out, &dxe}) b->assign(n * c, 0.5f);
    for (auto* b : {&g, &u, &a, &da, &dg, &du}) b->assign(n * h, 0.25f);
    for (auto* b : {&w1, &w3, &w2, &dw1, &dw3, &dw2}) b->assign(h * c, 0.01f);
  }

  void run() {
    using detail::MatrixRef;
    const auto in = [](const std::vector<float>& v, std::size_t at, std::size_t r,
                       std::size_t cols) {
      return MatrixRef<const float>{v.data() + at, r, cols};
    };
    const auto out = [](std::vector<float>& v, std::size_t at, std::size_t r, std::size_t cols) {
      return MatrixRef<float>{v.data() + at, r, cols};
    };
    std::size_t r0 = 0;
    for (std::size_t n : rows) {
      const std::size_t xc = r0 * c, xh = r0 * h;
      detail::gemm<float>("floor", in(x, xc, n, c), false, in(w1, 0, h, c), true, out(g, xh, n, h),
                          false);
      detail::gemm<float>("floor", in(x, xc, n, c), false, in(w3, 0, h, c), true, out(u, xh, n, h),
                          false);
      detail::gemm<float>("floor", in(a, xh, n, h), false, in(w2, 0, c, h), true, out(o, xc, n, c),
                          false);
      detail::gemm<float>("floor", in(d_out, xc, n, c), false, in(w2, 0, c, h), false,
                          out(da, xh, n, h), false);
      detail::gemm<float>("floor", in(d_out, xc, n, c), true, in(a, xh, n, h), false,
                          out(dw2, 0, c, h), true);
      detail::gemm<float>("floor", in(dg, xh, n, h), true, in(x, xc, n, c), false,
                          out(dw1, 0, h, c), true);
      detail::gemm<float>("floor", in(du, xh, n, h), true, in(x, xc, n, c), false,
                          out(dw3, 0, h, c), true);
      detail::gemm<float>("floor", in(dg, xh, n, h), false, in(w1, 0, h, c), false,
                          out(dxe, xc, n, c), false);
      detail::gemm<float>("floor", in(du, xh, n, h), false, in(w3, 0, h, c), false,
                          out(dxe, xc, n, c), true);
      r0 += n;
    }
  }
};

int run(const Config& c) {
  // Peak memory first, each contestant in a child process of its own (the
  // parent has started no thread yet).
  const auto xtgrad_contestant = [&c]() -> std::function<void()> {
    std::mt19937 generator(20261205);
    auto moe = std::make_shared<XtgradMoe>(c, generator);
    return [moe] { moe->run(); };
  };
  const double xt_mib = peak_mib_in_child(c, false, xtgrad_contestant);
  double lt_mib = -1;
#ifdef XTGRAD_BENCH_LIBTORCH
  lt_mib = peak_mib_in_child(c, true, [&c] { return libtorch_contestant(c); });
  const std::string libtorch = init_libtorch(c.threads);
#endif
  const std::string openblas = init_openblas(c.threads);
  set_num_threads(c.threads);
  const std::string note = openblas_core_note();
  std::cout << "bench_moe: one mixture-of-experts layer (" << to_string(c.activation)
            << "-gated experts), float32, forward + backward, " << c.threads
            << " thread(s)\n  CPU: " << cpu_model() << " (" << vector_extensions()
            << ")\n  OpenBLAS: " << openblas << (note.empty() ? "" : "\n  note: " + note)
            << "\n  float GEMMs: " << gemm_backend_info() << "\n  load average: " << load_average()
            << "\n  layer: tokens " << c.tokens << ", C " << c.c << ", experts " << c.experts
            << ", k " << c.k << ", expert hidden " << c.hidden << ", dropless, " << c.inputs
            << " input(s)" << (c.quick ? "\n  --quick: smoke run, not a measurement" : "") << "\n";

  std::mt19937 generator(20261205);
  XtgradMoe moe(c, generator);
  std::vector<std::vector<std::size_t>> kept;
  for (std::size_t i = 0; i < c.inputs; ++i) {
    moe.run();  // the routings the floor copies
    kept.push_back(moe.layer.router_stats().kept);
  }
  FloorMoe floor(c, kept[0]);
  std::cout << "  tokens per expert (first input):";
  for (std::size_t n : kept[0]) std::cout << " " << n;
  std::cout << "\n";

  TimingOptions timing;
  timing.settle_seconds = 0;
  if (c.quick) {
    timing.warmup = 1;
    timing.min_rounds = 2;
    timing.max_rounds = 2;
    timing.min_seconds = 0;
    timing.min_sample_seconds = 0;
  }
  std::vector<Contestant> contestants{{"xtgrad", [&] { moe.run(); }},
                                      {"floor", [&] { floor.run(); }}};
#ifdef XTGRAD_BENCH_LIBTORCH
  const std::function<void()> torch_step = libtorch_contestant(c);
  contestants.push_back({"libtorch", torch_step});
#endif
  const std::vector<Timing> t = measure_interleaved(contestants, timing);
  const double flops = 2.0 * 9.0 * double(c.tokens * c.k) * double(c.c) * double(c.hidden);
  std::printf("\n  xtgrad MoE step  %10.3f ms  (%.1f GFLOP/s of expert GEMMs)\n", t[0].median * 1e3,
              flops / t[0].median * 1e-9);
  std::printf("  GEMM floor       %10.3f ms  (%.1f GFLOP/s)\n", t[1].median * 1e3,
              flops / t[1].median * 1e-9);
#ifdef XTGRAD_BENCH_LIBTORCH
  std::printf("  LibTorch %-7s %10.3f ms  (Hugging Face's MixtralSparseMoeBlock)\n",
              libtorch.c_str(), t[2].median * 1e3);
#endif
  std::printf("  xt/floor         %10.3f   (median of per-round ratios; goal <= 1.15)\n",
              paired_ratio(t[0], t[1]));
#ifdef XTGRAD_BENCH_LIBTORCH
  std::printf("  LibTorch/xt      %10.3f   (median of per-round ratios; goal >= 3)\n",
              paired_ratio(t[2], t[0]));
#endif
  std::printf(
      "  peak memory above the layer and its inputs (3 steps, own process): xtgrad %.1f MiB",
      xt_mib);
  if (lt_mib > 0)
    std::printf(", LibTorch %.1f MiB, xt/LibTorch %.3f (goal <= 0.5)", lt_mib, xt_mib / lt_mib);
  std::printf("\n");
  return 0;
}

#if XTGRAD_HAVE_MPI
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run_expert_parallel(const Config& c) {
  distributed::Communicator comm;
  const auto p = static_cast<std::size_t>(comm.size());
  if (c.tokens % p != 0 || c.experts % p != 0) {
    if (comm.rank() == 0)
      std::cerr << "bench_moe: --tokens and --experts must be multiples of the " << p
                << " processes\n";
    return 2;
  }
  init_openblas(c.threads);
  set_num_threads(c.threads);
  std::mt19937 generator(20261205), same(20261205);
  XtgradMoe one(c, generator), sharded(c, same);
  const std::size_t rows = c.tokens / p, first = rows * static_cast<std::size_t>(comm.rank());
  for (xt::xarray<float>& x : sharded.x)
    x = xt::view(xt::xarray<float>(x), xt::range(first, first + rows));
  sharded.dy = xt::view(xt::xarray<float>(sharded.dy), xt::range(first, first + rows));
  distributed::shard_experts(comm, sharded.layer);
  distributed::GradientSynchronizer<float> sync(comm, sharded.layer);  // the router
  sync.attach(sharded.tape);
  const auto step = [&] {
    sharded.run();
    sync.finish();
  };
  const auto timed = [&](const auto& f) {
    comm.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    comm.barrier();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  if (comm.rank() == 0) one.run();
  step();  // warm
  std::vector<double> t1, tp, ratio;
  for (int r = 0; r < c.rounds; ++r) {
    t1.push_back(timed([&] {
      if (comm.rank() == 0) one.run();
    }));
    tp.push_back(timed(step));
    ratio.push_back(t1.back() / tp.back());
  }
  sync.detach();
  if (comm.rank() == 0) {
    std::cout << "bench_moe --expert-parallel: one mixture-of-experts layer (SwiGLU experts), "
                 "float32, forward + backward, "
              << c.threads << " thread(s) per rank\n  CPU: " << cpu_model() << ", "
              << std::thread::hardware_concurrency() << " hardware threads, load average "
              << load_average() << "\n  layer: global batch " << c.tokens << " tokens, C " << c.c
              << ", experts " << c.experts << ", k " << c.k << ", expert hidden " << c.hidden
              << ", dropless; medians of " << c.rounds << " interleaved rounds\n";
    const double m1 = median(t1), mp = median(tp);
    std::printf("  1 rank            %10.3f ms  %10.0f tokens/s\n", m1 * 1e3,
                double(c.tokens) / m1);
    std::printf(
        "  %zu ranks (EP %zu)   %10.3f ms  %10.0f tokens/s  (%zu experts, %zu tokens each)\n", p, p,
        mp * 1e3, double(c.tokens) / mp, c.experts / p, rows);
    std::printf("  speed-up          %10.2f   (median of per-round ratios; %zu is ideal)\n",
                median(ratio), p);
  }
  return 0;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  Config c;
  CLI::App app{"bench_moe: a mixture-of-experts layer against its per-expert GEMM floor"};
  app.add_option("--tokens", c.tokens, "rows of x")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--c", c.c, "model width")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--experts", c.experts, "experts")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--k", c.k, "experts per token")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--hidden", c.hidden, "expert hidden width")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--threads", c.threads, "threads (xtgrad's pool and OpenBLAS)")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  app.add_option("--inputs", c.inputs, "inputs cycled through (routings that change per call)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  std::string activation = "silu";
  app.add_option("--activation", activation, "the experts' gate activation")
      ->capture_default_str()
      ->check(CLI::IsMember({"silu", "gelu_tanh"}));
  bool demo = false;
  app.add_flag("--demo", demo,
               "train_gpt's MoE layer (docs/demos.md): --tokens 1024 --c 64 --experts 4 --k 1 "
               "--hidden 170 --activation gelu_tanh --inputs 4");
  app.add_flag("--quick", c.quick, "smoke run for CI: two rounds, no minimum time");
  app.add_flag("--expert-parallel", c.expert_parallel,
               "under mpirun: 1 rank against all ranks with the experts sharded");
  app.add_option("--rounds", c.rounds, "rounds of --expert-parallel")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);
  c.activation = activation == "gelu_tanh" ? Activation::gelu_tanh : Activation::silu;
  if (demo) {
    c.tokens = 1024, c.c = 64, c.experts = 4, c.k = 1, c.hidden = 170, c.inputs = 4;
    c.activation = Activation::gelu_tanh;
  }
  if (c.k > c.experts) {
    std::cerr << "bench_moe: --k " << c.k << " exceeds --experts " << c.experts << "\n";
    return 2;
  }
  if (c.expert_parallel) {
#if XTGRAD_HAVE_MPI
    return run_expert_parallel(c);
#else
    std::cerr << "bench_moe: --expert-parallel needs the build with distributed/ (MPI)\n";
    return 2;
#endif
  }
  return run(c);
}
