// The floors: the GEMMs of an FFN called straight through the faster of
// OpenBLAS and oneDNN on preallocated buffers, and a plain memory copy.
#include <cblas.h>

#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <chrono>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <xtgrad/engine/kernels/onednn_gemm.hpp>
#include <xtgrad/engine/kernels/parallel.hpp>

#include "cases.hpp"

extern "C" {
// OpenBLAS's own API (its cblas.h declares them too, the reference cblas.h does not).
void openblas_set_num_threads(int num_threads);
char* openblas_get_config(void);
char* openblas_get_corename(void);
}

namespace xtgrad::bench {

namespace {

constexpr unsigned k_seed = 99;

// The floors' buffers start on a cache line, as xtensor's do (xsimd's aligned
// allocator). From a plain std::vector (16 bytes past a line, from glibc),
// every vector load of the roofline crossed two lines: its four-row loop ran
// up to 2x slower from L3 than on the same weights aligned (measured on a
// 2-core AMD EPYC), a floor the kernels it bounds could beat.
using Buffer = std::vector<float, xsimd::aligned_allocator<float, 64>>;

Buffer random_buffer(std::size_t n, unsigned seed) {
  std::mt19937 engine(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Buffer v(n);
  for (float& x : v) x = dist(engine);
  return v;
}

// c[m, n] = op(a) op(b) (+ c when accumulate), row-major, lda/ldb/ldc from
// the shapes, by OpenBLAS's sgemm or oneDNN's float matmul (as xtgrad calls
// it: detail::onednn_gemm, split over xtgrad's pool).
void library_gemm(bool use_onednn, bool transpose_a, bool transpose_b, int m, int n, int k,
                  const float* a, const float* b, float* c, bool accumulate) {
  if (use_onednn) {
    const auto size = [](int v) { return static_cast<std::size_t>(v); };
    detail::onednn_gemm(a, size(transpose_a ? m : k), transpose_a, b, size(transpose_b ? k : n),
                        transpose_b, c, size(n), size(m), size(n), size(k), accumulate);
    return;
  }
  cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
              transpose_b ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a, transpose_a ? m : k, b,
              transpose_b ? k : n, accumulate ? 1.0f : 0.0f, c, n);
}

// The products of a floor, each by the faster library for its shape: the
// floor is the fastest backend's GEMMs, whichever xtgrad is set to use.
// The first run (choose_libraries) times every product on both libraries
// (best of three each, in call order) and keeps the faster; later runs call
// the products in the same order with those choices. Without oneDNN in the
// build, every product is OpenBLAS's.
class FastestGemms {
 public:
  void operator()(bool transpose_a, bool transpose_b, int m, int n, int k, const float* a,
                  const float* b, float* c, bool accumulate = false) {
    if (choosing_) {
      use_onednn_.push_back(
          detail::onednn_compiled() &&
          best_of_three(true, transpose_a, transpose_b, m, n, k, a, b, c, accumulate) <
              best_of_three(false, transpose_a, transpose_b, m, n, k, a, b, c, accumulate));
    }
    library_gemm(use_onednn_.at(next_++), transpose_a, transpose_b, m, n, k, a, b, c, accumulate);
  }
  // Runs run() once choosing the libraries; run() must call the products in
  // the same order every time.
  template <class Run>
  void choose_libraries(Run&& run) {
    choosing_ = true;
    use_onednn_.clear();
    run();
    choosing_ = false;
  }
  // Before each run.
  void restart() { next_ = 0; }

 private:
  double best_of_three(bool use_onednn, bool transpose_a, bool transpose_b, int m, int n, int k,
                       const float* a, const float* b, float* c, bool accumulate) const {
    double best = 0;
    for (int round = 0; round < 3; ++round) {
      const auto start = std::chrono::steady_clock::now();
      library_gemm(use_onednn, transpose_a, transpose_b, m, n, k, a, b, c, accumulate);
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      best = round == 0 ? seconds : std::min(best, seconds);
    }
    return best;
  }

  std::vector<bool> use_onednn_;
  std::size_t next_ = 0;
  bool choosing_ = false;
};

// The buffers of both layouts: two-layer weights are [out, in] (PyTorch), the
// gated ones [in, out] (GatedFFN), exactly as the modules store them.
struct FloorState {
  Family family;
  Pass pass;
  int n, d, h;
  Buffer x, w1, w2, w3, hidden, gate, product, y;          // forward
  Buffer dy, dproduct, dhidden, dgate, dx, dw1, dw2, dw3;  // backward
  FastestGemms gemm;

  FloorState(Family family_, Pass pass_, FfnShape s)
      : family(family_),
        pass(pass_),
        n(static_cast<int>(s.tokens)),
        d(static_cast<int>(s.d_model)),
        h(static_cast<int>(s.d_hidden)) {
    const std::size_t nd = s.tokens * s.d_model, nh = s.tokens * s.d_hidden,
                      dh = s.d_model * s.d_hidden;
    x = random_buffer(nd, k_seed);
    dy = random_buffer(nd, k_seed + 1);
    w1 = random_buffer(dh, k_seed + 2);
    w2 = random_buffer(dh, k_seed + 3);
    hidden.resize(nh);
    y.resize(nd);
    dhidden.resize(nh);
    dx.resize(nd);
    dw1.resize(dh);
    dw2.resize(dh);
    if (family == Family::swiglu) {
      w3 = random_buffer(dh, k_seed + 4);
      gate.resize(nh);
      product = random_buffer(nh, k_seed + 5);  // stands for u * silu(g), which the floor skips
      dproduct.resize(nh);
      dgate.resize(nh);
      dw3.resize(dh);
    }
  }

  void run() {
    gemm.restart();
    family == Family::swiglu ? run_gated() : run_two_layer();
  }

  // relu / gelu, W1 [H, D], W2 [D, H]
  void run_two_layer() {
    gemm(false, true, n, h, d, x.data(), w1.data(), hidden.data());  // hidden = x W1^T
    gemm(false, true, n, d, h, hidden.data(), w2.data(), y.data());  // y = hidden W2^T
    if (pass == Pass::forward) return;
    gemm(false, false, n, h, d, dy.data(), w2.data(), dhidden.data());  // dhidden = dy W2
    gemm(true, false, d, h, n, dy.data(), hidden.data(), dw2.data());   // dW2 = dy^T hidden
    gemm(false, false, n, d, h, dhidden.data(), w1.data(), dx.data());  // dx = dhidden W1
    gemm(true, false, h, d, n, dhidden.data(), x.data(), dw1.data());   // dW1 = dhidden^T x
  }

  // swiglu, Wu = w1, Wg = w2 [D, H], Wd = w3 [H, D]
  void run_gated() {
    gemm(false, false, n, h, d, x.data(), w1.data(), hidden.data());   // u = x Wu
    gemm(false, false, n, h, d, x.data(), w2.data(), gate.data());     // g = x Wg
    gemm(false, false, n, d, h, product.data(), w3.data(), y.data());  // y = p Wd
    if (pass == Pass::forward) return;
    gemm(false, true, n, h, d, dy.data(), w3.data(), dproduct.data());  // dp = dy Wd^T
    gemm(true, false, h, d, n, product.data(), dy.data(), dw3.data());  // dWd = p^T dy
    // du and dg would come from dp; the floor reuses dp and dhidden for them.
    gemm(true, false, d, h, n, x.data(), dproduct.data(), dw1.data());       // dWu = x^T du
    gemm(true, false, d, h, n, x.data(), dhidden.data(), dw2.data());        // dWg = x^T dg
    gemm(false, true, n, d, h, dproduct.data(), w1.data(), dx.data());       // dx = du Wu^T
    gemm(false, true, n, d, h, dhidden.data(), w2.data(), dx.data(), true);  // dx += dg Wg^T
  }
};

// The GEMMs of a batched matmul, one batch at a time, as xtgrad's matmul makes them.
struct MatmulFloorState {
  Pass pass;
  int batch, m, k, n;
  Buffer a, b, y, dy, da, db;
  FastestGemms gemm;

  void run() {
    gemm.restart();
    const std::size_t mk = std::size_t(m) * k, kn = std::size_t(k) * n, mn = std::size_t(m) * n;
    for (std::size_t i = 0; i < std::size_t(batch); ++i)  // y_i = a_i b_i
      gemm(false, false, m, n, k, a.data() + i * mk, b.data() + i * kn, y.data() + i * mn);
    if (pass == Pass::forward) return;
    for (std::size_t i = 0; i < std::size_t(batch); ++i)  // da_i += dy_i b_i^T
      gemm(false, true, m, k, n, dy.data() + i * mn, b.data() + i * kn, da.data() + i * mk, true);
    for (std::size_t i = 0; i < std::size_t(batch); ++i)  // db_i += a_i^T dy_i
      gemm(true, false, k, n, m, a.data() + i * mk, dy.data() + i * mn, db.data() + i * kn, true);
  }
};

// A copy loop with ordinary vector loads and stores, as the activation kernels
// write. (std::memcpy switches to non-temporal stores above a size tied to the
// cache, here below 16 MB: it would then measure the DRAM round trip that a
// cache-resident kernel never makes, and the floor would sit above the kernels.)
struct CopyState {
  Buffer source, destination;
  void run() {
    using Batch = xsimd::batch<float>;
    const std::size_t n = source.size();
    const float* from = source.data();
    float* to = destination.data();
    std::size_t i = 0;
    for (; i + Batch::size <= n; i += Batch::size)
      Batch::load_unaligned(from + i).store_unaligned(to + i);
    for (; i < n; ++i) to[i] = from[i];
  }
};

// out[j] = a[j] (+ b[j]) for j < n, with the vector loads and stores of
// CopyState; with no out, a sum of a (a pure read).
float stream(const float* a, const float* b, float* out, std::size_t n) {
  using Batch = xsimd::batch<float>;
  Batch total(0.0f);
  std::size_t i = 0;
  for (; i + Batch::size <= n; i += Batch::size) {
    Batch v = Batch::load_unaligned(a + i);
    if (b) v += Batch::load_unaligned(b + i);
    if (out)
      v.store_unaligned(out + i);
    else
      total += v;
  }
  float rest = 0.0f;
  for (; i < n; ++i) {
    const float v = a[i] + (b ? b[i] : 0.0f);
    if (out)
      out[i] = v;
    else
      rest += v;
  }
  return xsimd::hadd(total) + rest;
}

// Chains of fused multiply-adds the roofline keeps in flight: enough to hide
// an FMA's latency (4 cycles, 2 a cycle) with room to spare where 32 vector
// registers allow it. With 8 on AVX-512, 5 to 7 rows ran 5 to 7 chains and
// 8 rows had no slack: the x W^T kernel beat that floor at 5 rows (measured
// on a 2-core AMD EPYC).
#if XSIMD_WITH_AVX512F
constexpr std::size_t k_roofline_chains = 16;
#else
constexpr std::size_t k_roofline_chains = 8;  // 16 vector registers
#endif

// The multiply-adds of an N-row product on one read of w[0, n): each weight
// vector, as it streams past, is multiplied into N accumulators (standing for
// the rows' activations, held in registers). Enough vectors are loaded a step
// for k_roofline_chains chains (at most 8 loads; on AVX2, 8 / N of them, so
// that the accumulators fit its registers). Returns the sum of the
// accumulators (a result the compiler must compute).
template <std::size_t N>
float stream_multiply_adds(const float* w, std::size_t n) {
  using Batch = xsimd::batch<float>;
  constexpr std::size_t wanted = k_roofline_chains == 8 ? 8 / N : (k_roofline_chains + N - 1) / N;
  constexpr std::size_t loads = wanted < 1 ? 1 : wanted > 8 ? 8 : wanted;
  constexpr std::size_t step = loads * Batch::size;
  Batch x[N], acc[loads][N];
  for (std::size_t r = 0; r < N; ++r) {
    x[r] = Batch(1.0f + 1e-3f * static_cast<float>(r));
    for (std::size_t u = 0; u < loads; ++u) acc[u][r] = Batch(0.0f);
  }
  std::size_t i = 0;
  for (; i + step <= n; i += step)
    for (std::size_t u = 0; u < loads; ++u) {
      const Batch v = Batch::load_unaligned(w + i + u * Batch::size);
      for (std::size_t r = 0; r < N; ++r) acc[u][r] = xsimd::fma(v, x[r], acc[u][r]);
    }
  Batch total(0.0f);
  for (std::size_t u = 0; u < loads; ++u)
    for (std::size_t r = 0; r < N; ++r) total += acc[u][r];
  float rest = 0.0f;
  for (; i < n; ++i)
    for (std::size_t r = 0; r < N; ++r) rest += w[i] * (1.0f + 1e-3f * static_cast<float>(r));
  return xsimd::hadd(total) + rest;
}

template <std::size_t... N>
float stream_multiply_adds(std::index_sequence<N...>, std::size_t rows, const float* w,
                           std::size_t n) {
  float sum = 0.0f;
  ((rows == N + 1 ? void(sum = stream_multiply_adds<N + 1>(w, n)) : void()), ...);
  return sum;
}

struct RooflineState {
  std::size_t rows = 1;  // N, 1 to k_roofline_rows
  Buffer weights;
  float sink = 0.0f;
  static constexpr std::size_t k_parts = 64;  // weights.size() is a multiple
  float partial[k_parts] = {};                // one sum per part

  void run() {
    const float* w = weights.data();
    const std::size_t part = weights.size() / k_parts;
    // the parts split over the threads in use
    xtgrad::detail::parallel_for_rows(k_parts, 1, [&](std::size_t p0, std::size_t p1) {
      for (std::size_t p = p0; p < p1; ++p)
        partial[p] = stream_multiply_adds(std::make_index_sequence<k_roofline_rows>(), rows,
                                          w + p * part, part);
    });
    for (float s : partial) sink += s;
  }
};

struct RowwiseFloorState {
  RowOp op;
  Pass pass;
  std::size_t n = 0;
  Buffer x, y, dy, dx;
  float sink = 0.0f;  // keeps the forward read of cross_entropy

  void run() {
    if (op == RowOp::cross_entropy) {
      sink += stream(x.data(), nullptr, nullptr, n);  // forward: read x
      if (pass == Pass::forward_backward) stream(x.data(), nullptr, dx.data(), n);  // dx = x
      return;
    }
    stream(x.data(), nullptr, y.data(), n);  // forward: y = x
    if (pass == Pass::forward) return;
    const bool from_output = op == RowOp::softmax || op == RowOp::log_softmax;
    stream(dy.data(), from_output ? y.data() : x.data(), dx.data(), n);  // dx = dy + x or y
  }
};

}  // namespace

Runner rowwise_floor(RowOp op, Pass pass, RowShape shape) {
  auto state = std::make_shared<RowwiseFloorState>();
  state->op = op;
  state->pass = pass;
  state->n = shape.rows * shape.cols;
  state->x = random_buffer(state->n, k_seed + 10);
  state->dy = random_buffer(state->n, k_seed + 11);
  state->y.assign(state->n, 0.0f);
  state->dx.assign(state->n, 0.0f);
  return [state] { state->run(); };
}

Runner roofline_floor(Family family, FfnShape shape) {
  if (shape.tokens < 1 || shape.tokens > k_roofline_rows)
    throw std::invalid_argument("roofline_floor: tokens is " + std::to_string(shape.tokens) +
                                ", expected 1 to " + std::to_string(k_roofline_rows));
  auto state = std::make_shared<RooflineState>();
  state->rows = shape.tokens;
  const std::size_t matrices = family == Family::swiglu ? 3 : 2;
  state->weights = random_buffer(matrices * shape.d_model * shape.d_hidden, k_seed + 12);
  return [state] { state->run(); };
}

Runner gemm_floor(Family family, Pass pass, FfnShape shape) {
  auto state = std::make_shared<FloorState>(family, pass, shape);
  state->gemm.choose_libraries([&] { state->run(); });
  return [state] { state->run(); };
}

Runner matmul_floor(Pass pass, MatmulShape shape) {
  auto state = std::make_shared<MatmulFloorState>();
  state->pass = pass;
  state->batch = static_cast<int>(shape.batch);
  state->m = static_cast<int>(shape.m);
  state->k = static_cast<int>(shape.k);
  state->n = static_cast<int>(shape.n);
  const std::size_t mk = shape.batch * shape.m * shape.k, kn = shape.batch * shape.k * shape.n,
                    mn = shape.batch * shape.m * shape.n;
  state->a = random_buffer(mk, k_seed + 7);
  state->b = random_buffer(kn, k_seed + 8);
  state->dy = random_buffer(mn, k_seed + 9);
  state->y.resize(mn);
  state->da.assign(mk, 0.0f);
  state->db.assign(kn, 0.0f);
  state->gemm.choose_libraries([&] { state->run(); });
  return [state] { state->run(); };
}

Runner copy_floor(std::size_t n) {
  auto state = std::make_shared<CopyState>();
  state->source = random_buffer(n, k_seed + 6);
  state->destination.assign(n, 0.0f);
  return [state] { state->run(); };
}

std::string openblas_core() {
  return openblas_get_corename();
}

std::string init_openblas(int threads) {
  openblas_set_num_threads(threads);
  return std::string(openblas_get_config()) + " (core " + openblas_core() + ")";
}

}  // namespace xtgrad::bench
