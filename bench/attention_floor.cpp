// The GEMM floor of attention (attention_cases.hpp, attention_floor): the
// products of Q K^T, S V and their gradients, per head, through cblas_sgemm.
#include <cblas.h>

#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <memory>
#include <random>
#include <vector>

#include "attention_cases.hpp"

namespace xtgrad::bench {

namespace {

constexpr unsigned k_seed = 77;
// Causal: the query rows in this many blocks (of at least k_min_block rows),
// each block against the keys up to its last row.
constexpr std::size_t k_causal_blocks = 16;
constexpr std::size_t k_min_block = 64;

using Buffer = std::vector<float, xsimd::aligned_allocator<float, 64>>;

Buffer random_buffer(std::size_t n, unsigned seed) {
  std::mt19937 engine(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Buffer v(n);
  for (float& x : v) x = dist(engine);
  return v;
}

// c[m, n] (ldc) = op(a) op(b) + beta c, row-major with explicit leading dimensions.
void gemm(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k,
          const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
          std::size_t ldc) {
  cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
              transpose_b ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), 1.0f, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta,
              c, static_cast<int>(ldc));
}

struct AttentionFloorState {
  std::size_t heads = 0, t = 0, d = 0;  // B * H, T, Dh
  std::size_t block = 0;                // query rows per block (t when not causal)
  Buffer q, k, v, d_out;                // inputs [B*H, T, Dh]
  Buffer out, dq, dk, dv;               // outputs [B*H, T, Dh]
  Buffer s, ds;                         // one head's scores and their gradient [T, T]

  void run() {
    const std::size_t td = t * d;
    for (std::size_t h = 0; h < heads; ++h)
      head(q.data() + h * td, k.data() + h * td, v.data() + h * td, d_out.data() + h * td,
           out.data() + h * td, dq.data() + h * td, dk.data() + h * td, dv.data() + h * td);
  }

  // One head. Blocks of query rows [r0, r0 + rows) against keys [0, r0 + rows)
  // (one block of t rows when not causal). Backward takes the last block
  // first: it covers every key, so that dK and dV, which each block adds to,
  // are written (beta 0) on all their rows first.
  void head(const float* qh, const float* kh, const float* vh, const float* doh, float* oh,
            float* dqh, float* dkh, float* dvh) {
    const std::size_t blocks = (t + block - 1) / block;
    for (std::size_t b = 0; b < blocks; ++b) {  // forward
      const std::size_t r0 = b * block, rows = std::min(block, t - r0);
      const std::size_t keys = r0 + rows;
      float* sb = s.data() + r0 * t;
      gemm(false, true, rows, keys, d, qh + r0 * d, d, kh, d, 0.0f, sb, t);   // S = Q K^T
      gemm(false, false, rows, d, keys, sb, t, vh, d, 0.0f, oh + r0 * d, d);  // O = S V
    }
    for (std::size_t b = blocks; b-- > 0;) {  // backward
      const std::size_t r0 = b * block, rows = std::min(block, t - r0);
      const std::size_t keys = r0 + rows;
      const float beta = b + 1 == blocks ? 0.0f : 1.0f;
      float* sb = s.data() + r0 * t;
      float* dsb = ds.data() + r0 * t;
      gemm(false, true, rows, keys, d, qh + r0 * d, d, kh, d, 0.0f, sb, t);     // S = Q K^T
      gemm(false, true, rows, keys, d, doh + r0 * d, d, vh, d, 0.0f, dsb, t);   // dS = dO V^T
      gemm(true, false, keys, d, rows, sb, t, doh + r0 * d, d, beta, dvh, d);   // dV += S^T dO
      gemm(false, false, rows, d, keys, dsb, t, kh, d, 0.0f, dqh + r0 * d, d);  // dQ = dS K
      gemm(true, false, keys, d, rows, dsb, t, qh + r0 * d, d, beta, dkh, d);   // dK += dS^T Q
    }
  }
};

}  // namespace

double attention_flops(const AttentionShape& shape) {
  const double t = static_cast<double>(shape.tokens);
  const double pairs = shape.causal ? t * (t + 1) / 2 : t * t;  // (query, key) pairs per head
  return 2.0 * 7.0 * pairs * static_cast<double>(shape.head_dim * shape.batch * shape.heads);
}

Runner attention_floor(const AttentionShape& shape) {
  auto state = std::make_shared<AttentionFloorState>();
  state->heads = shape.batch * shape.heads;
  state->t = shape.tokens;
  state->d = shape.head_dim;
  state->block = shape.causal
                     ? std::min(shape.tokens, std::max(k_min_block, shape.tokens / k_causal_blocks))
                     : shape.tokens;
  const std::size_t n = state->heads * state->t * state->d;
  state->q = random_buffer(n, k_seed);
  state->k = random_buffer(n, k_seed + 1);
  state->v = random_buffer(n, k_seed + 2);
  state->d_out = random_buffer(n, k_seed + 3);
  for (Buffer* b : {&state->out, &state->dq, &state->dk, &state->dv}) b->assign(n, 0.0f);
  for (Buffer* b : {&state->s, &state->ds}) b->assign(state->t * state->t, 0.0f);
  return [state] { state->run(); };
}

}  // namespace xtgrad::bench
