// bench_hvp: the time of a Hessian-vector product (engine/grad.hpp, hvp) of
// an MLP's loss with respect to all its parameters, against LibTorch's double
// backward on the same MLP with the same values (configure with
// -DXTGRAD_BENCH_LIBTORCH=ON):
//
//   OPENBLAS_CORETYPE=SkylakeX build/release/bench/bench_hvp
//       [--tokens 256 --d 256 --hidden 512 --layers 3 --threads 1]
//
// The MLP: `layers` linear layers d -> hidden -> ... -> d with tanh between,
// the loss mean((y - t)^2) on x, t [tokens, d]. One call records the forward,
// the gradient with create_graph (the ops' GradRules) and the backward of
// <g, v>, on a warm tape (cleared, not released, between calls), as
// LibTorch's grad(create_graph) + grad runs. Times are medians over
// interleaved rounds (bench/harness.hpp); xt/LT is the median of the
// per-round ratios (< 1: xtgrad is faster). The two results are compared
// element by element, so that both compute the same product.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <xtgrad/engine/engine.hpp>

#include "cases.hpp"
#include "harness.hpp"
#include "hvp_libtorch.hpp"  // HvpProblem; libtorch_hvp with XTGRAD_BENCH_LIBTORCH
#include "machine.hpp"

using namespace xtgrad;
using namespace xtgrad::bench;

namespace {

struct Config {
  std::size_t tokens = 256, d = 256, hidden = 512, layers = 3;
  int threads = 1;
  bool quick = false;
};

std::vector<float> uniform(std::size_t n, std::mt19937& generator, float scale) {
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> out(n);
  for (float& e : out) e = u(generator);
  return out;
}

HvpProblem make_problem(const Config& c) {
  std::mt19937 generator(20261205);
  HvpProblem p;
  p.tokens = c.tokens;
  p.widths.push_back(c.d);
  for (std::size_t l = 0; l + 1 < c.layers; ++l) p.widths.push_back(c.hidden);
  p.widths.push_back(c.d);
  p.x = uniform(c.tokens * c.d, generator, 1.0f);
  p.target = uniform(c.tokens * c.d, generator, 1.0f);
  for (std::size_t l = 0; l + 1 < p.widths.size(); ++l) {
    const std::size_t in = p.widths[l], out = p.widths[l + 1];
    const float bound = 1.0f / std::sqrt(static_cast<float>(in));  // nn.Linear's init range
    p.params.push_back(uniform(out * in, generator, bound));
    p.params.push_back(uniform(out, generator, bound));
    p.v.push_back(uniform(out * in, generator, 1.0f));
    p.v.push_back(uniform(out, generator, 1.0f));
  }
  return p;
}

xt::xarray<float> array(const std::vector<float>& data, const Shape& shape) {
  xt::xarray<float> a = xt::empty<float>(shape);
  std::copy(data.begin(), data.end(), a.data());
  return a;
}

// xtgrad's contestant: the MLP's Parameters, a warm tape, and the last H v.
struct XtgradHvp {
  std::vector<Parameter<float>> params;
  std::vector<xt::xarray<float>> v;
  xt::xarray<float> x, target;
  Tape<float> tape;
  std::vector<std::vector<float>> result;

  explicit XtgradHvp(const HvpProblem& p) {
    for (std::size_t l = 0; l + 1 < p.widths.size(); ++l) {
      const std::size_t in = p.widths[l], out = p.widths[l + 1];
      params.emplace_back("weight", array(p.params[2 * l], {out, in}));
      params.emplace_back("bias", array(p.params[2 * l + 1], {out}));
      v.push_back(array(p.v[2 * l], {out, in}));
      v.push_back(array(p.v[2 * l + 1], {out}));
    }
    x = array(p.x, {p.tokens, p.widths.front()});
    target = array(p.target, {p.tokens, p.widths.back()});
  }

  void run() {
    tape.clear();
    std::vector<GradInput<float>> inputs;
    Var<float> h = tape.leaf(x, false);
    const std::size_t layers = params.size() / 2;
    for (std::size_t l = 0; l < layers; ++l) {
      h = linear(h, tape.param(params[2 * l]), tape.param(params[2 * l + 1]));
      if (l + 1 < layers) h = tanh(h);
    }
    const Var<float> loss = mean(square(sub(h, tape.leaf(target, false))));
    for (Parameter<float>& p : params) inputs.emplace_back(p);
    const std::vector<Var<float>> hv = hvp(tape, loss, inputs, v);
    result.resize(hv.size());
    for (std::size_t k = 0; k < hv.size(); ++k)
      result[k].assign(hv[k].value().data(), hv[k].value().data() + hv[k].size());
  }
};

#ifdef XTGRAD_BENCH_LIBTORCH
// The largest |a - b| / (1e-3 max|b| + |b|) over every element: 0 when equal.
double worst_difference(const std::vector<std::vector<float>>& a,
                        const std::vector<std::vector<float>>& b) {
  double worst = 0;
  for (std::size_t k = 0; k < a.size(); ++k) {
    double scale = 0;
    for (float e : b[k]) scale = std::max(scale, std::abs(static_cast<double>(e)));
    for (std::size_t i = 0; i < a[k].size(); ++i) {
      const double d = std::abs(static_cast<double>(a[k][i]) - b[k][i]);
      worst = std::max(worst, d / (1e-3 * scale + std::abs(static_cast<double>(b[k][i]))));
    }
  }
  return worst;
}
#endif

int run(const Config& c) {
  const std::string openblas = init_openblas(c.threads);
  set_num_threads(c.threads);
  std::string libtorch = "off (configure with -DXTGRAD_BENCH_LIBTORCH=ON)";
#ifdef XTGRAD_BENCH_LIBTORCH
  libtorch = init_libtorch(c.threads);
#endif
  const std::string note = openblas_core_note();
  std::cout << "bench_hvp: " << compute_info() << "\n";
  std::cout << "bench_hvp: Hessian-vector product of an MLP's MSE loss, float32, " << c.threads
            << " thread(s)\n  CPU: " << cpu_model() << " (" << vector_extensions() << ")"
            << "\n  OpenBLAS: " << openblas << "\n  LibTorch: " << libtorch
            << (note.empty() ? "" : "\n  note: " + note) << "\n  load average: " << load_average()
            << "\n  MLP: tokens " << c.tokens << ", d " << c.d << ", hidden " << c.hidden << ", "
            << c.layers << " linear layers with tanh between"
            << (c.quick ? "\n  --quick: smoke run, not a measurement" : "") << "\n";

  const HvpProblem problem = make_problem(c);
  XtgradHvp xt_hvp(problem);
  std::vector<Contestant> contestants = {{"xtgrad", [&] { xt_hvp.run(); }}};
#ifdef XTGRAD_BENCH_LIBTORCH
  std::vector<std::vector<float>> lt_result;
  contestants.push_back({"libtorch", libtorch_hvp(problem, &lt_result)});
#endif
  TimingOptions timing;
  if (c.quick) {
    timing.warmup = 1;
    timing.min_rounds = 2;
    timing.max_rounds = 2;
    timing.min_seconds = 0;
    timing.min_sample_seconds = 0;
  }
  const std::vector<Timing> t = measure_interleaved(contestants, timing);
  std::printf("\n  xtgrad hvp     %10.3f ms\n", t[0].median * 1e3);
#ifdef XTGRAD_BENCH_LIBTORCH
  std::printf("  libtorch hvp   %10.3f ms\n", t[1].median * 1e3);
  std::printf("  xt/LT          %10.3f   (median of per-round ratios; < 1: xtgrad is faster)\n",
              paired_ratio(t[0], t[1]));
  std::printf("  worst relative difference of H v: %.2e\n",
              worst_difference(xt_hvp.result, lt_result));
#endif
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
#ifdef XTGRAD_BENCH_LIBTORCH
  reexec_with_passive_omp(argv);  // see machine.hpp; --omp-default keeps libgomp's default
#endif
  Config c;
  CLI::App app{"bench_hvp: xtgrad's Hessian-vector product against LibTorch's double backward"};
  app.add_option("--tokens", c.tokens, "rows of x")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--d", c.d, "input and output width")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--hidden", c.hidden, "hidden width")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--layers", c.layers, "linear layers (>= 2)")
      ->capture_default_str()
      ->check(CLI::Range(2, 64));
  app.add_option("--threads", c.threads, "OpenBLAS (and LibTorch) threads")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  app.add_flag("--quick", c.quick, "smoke run for CI: two rounds, no minimum time");
  bool omp_default = false;
  app.add_flag("--omp-default", omp_default, "keep libgomp's default OMP_WAIT_POLICY");
  CLI11_PARSE(app, argc, argv);
  return run(c);
}
