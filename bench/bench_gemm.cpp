// bench_gemm: xtgrad's float GEMM backends against each other, on the
// products of the FFN bench (N 4096, D 512, H 2048) and of the char GPT's
// step (B*T 4096, C 128, vocabulary 96), forward and backward, and a whole
// FFN training step (activation_linear + linear, backward) on each backend.
// Every row times oneDNN's matmul (detail::onednn_gemm) and OpenBLAS's sgemm
// (detail::blas_gemm) in interleaved rounds and prints their medians and the
// median of the per-round ratios. OpenBLAS picks its kernel set when it is
// loaded: run once as is and once with OPENBLAS_CORETYPE=SkylakeX (or
// another core) in the environment to compare kernel sets. The regime rows
// compare oneDNN with detail::gemm's own small-product and few-row loops.
// The bf16 section times MatmulPrecision::bf16 against highest (f32) in
// interleaved rounds: oneDNN's products (the bf16 time includes xtgrad's
// conversion of both operands), the conversion alone, the regimes that
// detail::gemm keeps in float (oneDNN bf16 against its loop), the FFN step
// and the bench's GPT training steps (the char demo's model and one
// GPT-2-small block), with the relative error of each product.
// The packed section times the products whose b is a weight (forward and
// dx) read unpacked, from a packed copy made once and reused (inference, the
// fused ops' row blocks), and packed on every call (a new weight version
// per call: a training step's single use; below k_pack_first_use_rows rows
// a first use only notes the weight, so this is the unpacked product plus
// the bookkeeping), then the FFN step with packing on and off.
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <xtensor/xrandom.hpp>
#include <xtgrad/engine/engine.hpp>
#include <xtgrad/engine/gemm_backend.hpp>
#include <xtgrad/engine/kernels/bf16.hpp>
#include <xtgrad/engine/kernels/gemm.hpp>
#include <xtgrad/engine/kernels/onednn_gemm.hpp>
#include <xtgrad/engine/kernels/openblas_info.hpp>
#include <xtgrad/engine/matmul_precision.hpp>

#include "attention_cases.hpp"  // GptShape, xtgrad_gpt_step
#include "harness.hpp"

namespace {

using namespace xtgrad;
using xtgrad::bench::Contestant;
using xtgrad::bench::Runner;
using xtgrad::bench::TimingOptions;

// c[m, n] (+)= op(a) op(b) on owned random operands.
struct Product {
  std::size_t m, n, k;
  bool ta, tb, accumulate;
  std::vector<float> a, b, c;

  Product(std::size_t m_, std::size_t n_, std::size_t k_, bool ta_, bool tb_, bool acc)
      : m(m_), n(n_), k(k_), ta(ta_), tb(tb_), accumulate(acc), a(m * k), b(k * n), c(m * n) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1, 1);
    for (float& v : a) v = u(rng);
    for (float& v : b) v = u(rng);
    for (float& v : c) v = u(rng);
  }
  detail::MatrixRef<const float> ref_a() const { return {a.data(), ta ? k : m, ta ? m : k}; }
  detail::MatrixRef<const float> ref_b() const { return {b.data(), tb ? n : k, tb ? k : n}; }
  void onednn(MatmulPrecision precision = MatmulPrecision::highest, detail::WeightTag weight = {}) {
    detail::onednn_gemm(a.data(), ta ? m : k, ta, b.data(), tb ? k : n, tb, c.data(), n, m, n, k,
                        accumulate, precision, nullptr, weight);
  }
  void openblas() {
    detail::blas_gemm<float>(ref_a(), ta, ref_b(), tb, {c.data(), m, n}, accumulate);
  }
  // detail::gemm with the backend it chooses (its own loops for small or
  // few-row products).
  void xtgrad() {
    detail::gemm<float>("bench", ref_a(), ta, ref_b(), tb, {c.data(), m, n}, accumulate);
  }
};

struct Case {
  std::string name;
  std::size_t m, n, k;
  bool ta, tb, accumulate;
};

// y = x W^T (forward), dx = dy W, dW (+)= dy^T x of a Linear [in -> out] over `rows` rows.
void linear_cases(std::vector<Case>& cases, const std::string& name, std::size_t rows,
                  std::size_t in, std::size_t out) {
  cases.push_back({name + " fwd", rows, out, in, false, true, false});
  cases.push_back({name + " dx", rows, in, out, false, false, false});
  cases.push_back({name + " dW", out, in, rows, true, false, true});
}

void print_row(const std::string& name, double flops, const std::vector<Contestant>& contestants,
               const TimingOptions& timing) {
  const auto t = bench::measure_interleaved(contestants, timing);
  std::printf("%-28s", name.c_str());
  for (std::size_t i = 0; i < t.size(); ++i)
    std::printf(" %9.3f ms %7.1f GF/s", t[i].median * 1e3, flops / t[i].median * 1e-9);
  for (std::size_t i = 1; i < t.size(); ++i)
    std::printf("  %s/%s %.2f", contestants[i].name.c_str(), contestants[0].name.c_str(),
                bench::paired_ratio(t[i], t[0]));
  std::printf("\n");
  std::fflush(stdout);
}

// One FFN training step: relu(x W1^T + b1) W2^T + b2, its sum, backward.
struct FfnStep {
  Parameter<float> w1, b1, w2, b2;
  xt::xarray<float> x;
  Tape<float> tape;
  FfnStep(std::size_t n, std::size_t d, std::size_t h)
      : w1("w1", xt::random::randn<float>({h, d}) * 0.05f),
        b1("b1", xt::zeros<float>({h})),
        w2("w2", xt::random::randn<float>({d, h}) * 0.05f),
        b2("b2", xt::zeros<float>({d})),
        x(xt::random::randn<float>({n, d})) {}
  void run() {
    tape.clear();
    for (Parameter<float>* p : {&w1, &b1, &w2, &b2}) p->zero_grad();
    const Var<float> h = linear(tape.leaf(x, false), tape.param(w1), std::optional(tape.param(b1)));
    const Var<float> y =
        activation_linear(h, Activation::relu, tape.param(w2), std::optional(tape.param(b2)));
    tape.backward(sum(y));
  }
};

// max |c - c_f64| / max |c_f64| of the product at `precision`, against a
// double product of the same float operands (c starting from zero).
double relative_error(Product& p, MatmulPrecision precision) {
  std::fill(p.c.begin(), p.c.end(), 0.0f);
  const bool accumulate = p.accumulate;
  p.accumulate = false;
  p.onednn(precision);
  p.accumulate = accumulate;
  const std::vector<double> a(p.a.begin(), p.a.end()), b(p.b.begin(), p.b.end());
  std::vector<double> c(p.m * p.n);
  detail::blas_gemm<double>({a.data(), p.ta ? p.k : p.m, p.ta ? p.m : p.k}, p.ta,
                            {b.data(), p.tb ? p.n : p.k, p.tb ? p.k : p.n}, p.tb,
                            {c.data(), p.m, p.n}, false);
  double worst = 0, largest = 0;
  for (std::size_t i = 0; i < c.size(); ++i) {
    worst = std::max(worst, std::abs(p.c[i] - c[i]));
    largest = std::max(largest, std::abs(c[i]));
  }
  return worst / largest;
}

// The packed section (see the top of the file): weight products only (dW's
// b is an activation), at `rows` rows where given.
void packed_rows(const std::vector<Case>& products, const std::vector<std::size_t>& rows,
                 const TimingOptions& timing) {
  std::printf("-- packed weights: oneDNN unpacked, packed once (reused), packed per call\n");
  for (const Case& c : products) {
    if (c.accumulate) continue;
    for (const std::size_t m : rows) {
      Product p(m, c.n, c.k, c.ta, c.tb, false);
      const std::uint64_t id = detail::next_parameter_id();
      std::uint64_t version = 0;
      print_row(c.name + " rows " + std::to_string(m), 2.0 * m * c.n * c.k,
                {{"unpacked", [&] { p.onednn(); }},
                 {"reused",
                  [&] {
                    p.onednn(MatmulPrecision::highest, {id, 0});
                  }},
                 {"per call",
                  [&] {
                    p.onednn(MatmulPrecision::highest, {id, ++version});
                  }}},
                timing);
    }
  }
  detail::clear_packed_weights();
  FfnStep step(4096, 512, 2048);
  const auto packing = [&](bool on) {
    return [&step, on] {
      detail::set_weight_packing(on);
      step.run();
      for (Parameter<float>* w : {&step.w1, &step.w2}) w->mark_changed();  // as a step would
    };
  };
  print_row("ffn step N4096 D512 H2048", 3 * 2 * 2.0 * 4096 * 512 * 2048,
            {{"unpacked", packing(false)}, {"packed", packing(true)}}, timing);
  detail::set_weight_packing(true);
  detail::clear_packed_weights();
}

// Runs `run` at `precision` (set_matmul_precision), for a contestant.
template <class F>
bench::Runner at(MatmulPrecision precision, F run) {
  return [precision, run]() mutable {
    set_matmul_precision(precision);
    run();
  };
}

// The bf16 section (see the top of the file).
void bf16_rows(const std::vector<Case>& products, const std::vector<Case>& regimes,
               const TimingOptions& timing) {
  if (!matmul_precision_supported(MatmulPrecision::bf16)) {
    std::printf("-- bf16: not supported on this CPU (%s)\n", detail::onednn_bf16_kernel().c_str());
    return;
  }
  const auto f32 = MatmulPrecision::highest, bf16 = MatmulPrecision::bf16;
  std::printf("-- bf16: oneDNN f32, oneDNN bf16 (%s) with the conversion; relative error\n",
              detail::onednn_bf16_kernel().c_str());
  for (const Case& c : products) {
    Product p(c.m, c.n, c.k, c.ta, c.tb, c.accumulate);
    const double e32 = relative_error(p, f32), e16 = relative_error(p, bf16);
    std::printf("  error f32 %.1e bf16 %.1e: ", e32, e16);
    print_row(c.name, 2.0 * c.m * c.n * c.k,
              {{"f32", [&] { p.onednn(f32); }}, {"bf16", [&] { p.onednn(bf16); }}}, timing);
  }
  {
    // the conversion of the FFN's first layer: x [4096, 512] and W1 [2048, 512]
    Product p(4096, 2048, 512, false, true, false);
    std::vector<std::uint16_t> a16(p.a.size()), b16(p.b.size());
    print_row(
        "convert x 4096x512", 2.0 * 4096 * 512,
        {{"f32 product", [&] { p.onednn(f32); }},
         {"convert", [&] { detail::to_bf16_matrix(p.a.data(), 512, 4096, 512, a16.data()); }},
         {"convert W", [&] { detail::to_bf16_matrix(p.b.data(), 512, 2048, 512, b16.data()); }}},
        timing);
  }
  std::printf("-- bf16 in the regimes detail::gemm keeps in float: its loop (f32), oneDNN bf16\n");
  for (const Case& c : regimes) {
    Product p(c.m, c.n, c.k, c.ta, c.tb, c.accumulate);
    print_row(c.name, 2.0 * c.m * c.n * c.k,
              {{"loop", [&] { p.xtgrad(); }}, {"bf16", [&] { p.onednn(bf16); }}}, timing);
  }
  FfnStep step(4096, 512, 2048);
  {
    // ||g_bf16 - g_f32|| / ||g_f32|| of each weight's gradient
    set_matmul_precision(f32);
    step.run();
    const xt::xarray<float> dw1 = step.w1.grad, dw2 = step.w2.grad;
    set_matmul_precision(bf16);
    step.run();
    const auto difference = [](const xt::xarray<float>& g, const xt::xarray<float>& reference) {
      double d = 0, r = 0;
      for (std::size_t i = 0; i < g.size(); ++i) {
        const double x = g.data()[i], y = reference.data()[i];
        d += (x - y) * (x - y);
        r += y * y;
      }
      return std::sqrt(d / r);
    };
    std::printf("ffn step: bf16 against f32, relative 2-norm difference of dW1 %.1e, dW2 %.1e\n",
                difference(step.w1.grad, dw1), difference(step.w2.grad, dw2));
  }
  print_row("ffn step N4096 D512 H2048", 3 * 2 * 2.0 * 4096 * 512 * 2048,
            {{"f32", at(f32, [&] { step.run(); })}, {"bf16", at(bf16, [&] { step.run(); })}},
            timing);
  for (const bench::GptShape& shape :
       {bench::GptShape{"char L4 H4 C128 T128 B32", 96, 128, 4, 4, 128, 32, 128},
        bench::GptShape{"block L1 H12 C768 T1024 B1", 96, 1024, 1, 12, 768, 1, 1024}}) {
    bench::Runner gpt = bench::xtgrad_gpt_step(shape);
    print_row("gpt step " + shape.name, 0, {{"f32", at(f32, gpt)}, {"bf16", at(bf16, gpt)}},
              timing);
  }
  set_matmul_precision(f32);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"xtgrad's float GEMM backends: oneDNN against OpenBLAS"};
  std::vector<int> thread_counts{1, 2};
  std::string only = "products,regimes,step,bf16,packed";
  double seconds = 1;
  app.add_option("--threads", thread_counts, "thread counts (set_num_threads)");
  app.add_option("--only", only, "sections: products, regimes, step, bf16, packed");
  app.add_option("--seconds", seconds, "time per contestant and row");
  CLI11_PARSE(app, argc, argv);
  const auto on = [&](const char* section) { return only.find(section) != std::string::npos; };
  if (!detail::onednn_compiled()) {
    std::fprintf(stderr, "bench_gemm: this build has no oneDNN (XTGRAD_ONEDNN)\n");
    return 1;
  }
  std::printf("bench_gemm: %s\n", compute_info().c_str());
  std::printf("CPU ISA %s; %s; %s\n", detail::isa_name(detail::cpu_vector_isa()),
              detail::onednn_info().c_str(), detail::openblas_info().c_str());
  TimingOptions timing;
  timing.min_seconds = seconds;
  timing.settle_seconds = 0;

  std::vector<Case> products;
  linear_cases(products, "ffn 512->2048", 4096, 512, 2048);
  linear_cases(products, "ffn 2048->512", 4096, 2048, 512);
  linear_cases(products, "gpt 128->384", 4096, 128, 384);
  linear_cases(products, "gpt 128->128", 4096, 128, 128);
  linear_cases(products, "gpt 128->512", 4096, 128, 512);
  linear_cases(products, "gpt 512->128", 4096, 512, 128);
  linear_cases(products, "gpt 128->96", 4096, 128, 96);

  // The regimes detail::gemm keeps for its own loops: at most
  // k_small_gemm_macs multiply-adds, and at most k_streaming_rows rows.
  std::vector<Case> regimes = {
      {"small 128x16 . 16x8", 128, 8, 16, false, false, false},
      {"small 128x16 . (8x16)^T", 128, 8, 16, false, true, false},
      {"small 64x16 . 16x16", 64, 16, 16, false, false, false},
      {"small 6x8 . (16x8)^T", 6, 16, 8, false, true, false},
      {"small dW 16x6^T . 6x8", 16, 8, 6, true, false, true},
      {"rows 1 . (2048x512)^T", 1, 2048, 512, false, true, false},
      {"rows 4 . (2048x512)^T", 4, 2048, 512, false, true, false},
      {"rows 8 . (2048x512)^T", 8, 2048, 512, false, true, false},
      {"rows 8 . 512x2048", 8, 2048, 512, false, false, false},
      {"rows 16 . (2048x512)^T", 16, 2048, 512, false, true, false},
      {"rows 8 . (128x128)^T", 8, 128, 128, false, true, false},
  };

  for (const int threads : thread_counts) {
    set_num_threads(threads);
    std::printf("\n-- %d thread%s: oneDNN, OpenBLAS (%s)\n", threads, threads > 1 ? "s" : "",
                detail::openblas_core().c_str());
    if (on("products"))
      for (const Case& c : products) {
        Product p(c.m, c.n, c.k, c.ta, c.tb, c.accumulate);
        print_row(c.name, 2.0 * c.m * c.n * c.k,
                  {{"oneDNN", [&] { p.onednn(); }}, {"OpenBLAS", [&] { p.openblas(); }}}, timing);
      }
    if (on("regimes")) {
      std::printf("-- regimes: oneDNN, detail::gemm's own loop\n");
      for (const Case& c : regimes) {
        Product p(c.m, c.n, c.k, c.ta, c.tb, c.accumulate);
        print_row(c.name, 2.0 * c.m * c.n * c.k,
                  {{"oneDNN", [&] { p.onednn(); }}, {"loop", [&] { p.xtgrad(); }}}, timing);
      }
    }
    if (on("step")) {
      FfnStep step(4096, 512, 2048);
      const double flops = 3 * 2 * 2.0 * 4096 * 512 * 2048;
      print_row("ffn step N4096 D512 H2048", flops,
                {{"oneDNN",
                  [&] {
                    set_gemm_backend(GemmBackend::onednn);
                    step.run();
                  }},
                 {"OpenBLAS",
                  [&] {
                    set_gemm_backend(GemmBackend::openblas);
                    step.run();
                  }}},
                timing);
      set_gemm_backend(GemmBackend::onednn);
    }
    if (on("bf16")) bf16_rows(products, regimes, timing);
    if (on("packed")) packed_rows(products, {256, 1024, 4096}, timing);
  }
  return 0;
}
