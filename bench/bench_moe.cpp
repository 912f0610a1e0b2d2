// bench_moe: one mixture-of-experts layer (modules/moe.hpp, SparseMoe with
// SwiGLU experts), forward and backward, against its floor:
//
//   build/release/bench/bench_moe [--tokens 4096 --c 512 --experts 8 --k 2
//                                  --hidden 1024 --threads 1]
//
// xtgrad: SparseMoe::forward on a warm tape (cleared, not released, between
// calls), then tape.backward(y, dy): the router, softmax, top-k, the fused
// experts op and every gradient. The floor: the same per-expert GEMMs (three
// forward, six backward, over the same expert row counts as xtgrad's routing)
// through the GEMM entry point (engine/kernels/gemm.hpp) on buffers
// allocated once, and nothing else. Times are medians over interleaved
// rounds (bench/harness.hpp); xt/floor is the median of the per-round ratios.
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
#include <cmath>
#include <cstdio>
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

using namespace xtgrad;
using namespace xtgrad::bench;

namespace {

struct Config {
  std::size_t tokens = 4096, c = 512, experts = 8, k = 2, hidden = 1024;
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

// xtgrad's contestant: the layer, a warm tape, x and dy.
struct XtgradMoe {
  SparseMoe<float> layer;
  xt::xarray<float> x, dy;
  Tape<float> tape;

  XtgradMoe(const Config& c, std::mt19937& generator)
      : layer(c.c, c.hidden, options(c)),
        x(uniform({c.tokens, c.c}, generator, 1.0f)),
        dy(uniform({c.tokens, c.c}, generator, 1.0f)) {}

  static SparseMoeOptions options(const Config& c) {
    SparseMoeOptions o;
    o.num_experts = c.experts;
    o.top_k = c.k;
    return o;
  }

  void run() {
    tape.clear();
    const Var<float> y = layer(tape.leaf(x));
    tape.backward(y, dy);
  }
};

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
  const std::string openblas = init_openblas(c.threads);
  set_num_threads(c.threads);
  const std::string note = openblas_core_note();
  std::cout << "bench_moe: one mixture-of-experts layer (SwiGLU experts), float32, forward + "
               "backward, "
            << c.threads << " thread(s)\n  CPU: " << cpu_model() << " (" << vector_extensions()
            << ")\n  OpenBLAS: " << openblas << (note.empty() ? "" : "\n  note: " + note)
            << "\n  float GEMMs: " << gemm_backend_info() << "\n  load average: " << load_average()
            << "\n  layer: tokens " << c.tokens << ", C " << c.c << ", experts " << c.experts
            << ", k " << c.k << ", expert hidden " << c.hidden << ", dropless"
            << (c.quick ? "\n  --quick: smoke run, not a measurement" : "") << "\n";

  std::mt19937 generator(20261205);
  XtgradMoe moe(c, generator);
  moe.run();  // the routing the floor copies
  const MoeStats stats = moe.layer.router_stats();
  FloorMoe floor(c, stats.kept);
  std::cout << "  tokens per expert:";
  for (std::size_t n : stats.kept) std::cout << " " << n;
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
  const std::vector<Timing> t = measure_interleaved(
      {{"xtgrad", [&] { moe.run(); }}, {"floor", [&] { floor.run(); }}}, timing);
  const double flops = 2.0 * 9.0 * double(c.tokens * c.k) * double(c.c) * double(c.hidden);
  std::printf("\n  xtgrad MoE step  %10.3f ms  (%.1f GFLOP/s of expert GEMMs)\n", t[0].median * 1e3,
              flops / t[0].median * 1e-9);
  std::printf("  GEMM floor       %10.3f ms  (%.1f GFLOP/s)\n", t[1].median * 1e3,
              flops / t[1].median * 1e-9);
  std::printf("  xt/floor         %10.3f   (median of per-round ratios; goal <= 1.15)\n",
              paired_ratio(t[0], t[1]));
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
  sharded.x = xt::view(xt::xarray<float>(sharded.x), xt::range(first, first + rows));
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
  app.add_flag("--quick", c.quick, "smoke run for CI: two rounds, no minimum time");
  app.add_flag("--expert-parallel", c.expert_parallel,
               "under mpirun: 1 rank against all ranks with the experts sharded");
  app.add_option("--rounds", c.rounds, "rounds of --expert-parallel")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);
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
