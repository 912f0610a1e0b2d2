// The float GEMM backends (gemm_backend.hpp): oneDNN's matmul against
// OpenBLAS's sgemm and a long-double loop for every transpose pair and beta,
// empty and strided operands, concurrent threads and the primitive cache;
// the backend choice and its description; the stale-kernel warning.
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <xtgrad/engine/gemm_backend.hpp>
#include <xtgrad/engine/kernels/gemm.hpp>
#include <xtgrad/engine/kernels/onednn_gemm.hpp>
#include <xtgrad/engine/kernels/openblas_info.hpp>
#include <xtgrad/engine/matmul_precision.hpp>
#include <xtgrad/engine/threads.hpp>

#include "support/gemm_reference.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using xtgrad::testing::check_close;
using xtgrad::testing::check_gemm_all;
using xtgrad::testing::gemm_reference;
using xtgrad::testing::GemmDims;
using xtgrad::testing::random_array;

namespace {

// Sets the backend for a scope, then restores the previous one.
struct BackendScope {
  GemmBackend before = get_gemm_backend();
  explicit BackendScope(GemmBackend b) { set_gemm_backend(b); }
  ~BackendScope() { set_gemm_backend(before); }
};

// Products past the small-product and few-row loops (they reach the backend),
// tails of every kind, one row past the few-row bound, the char GPT's
// vocabulary head.
const std::vector<GemmDims> k_backend_dims = {{40, 50, 60},  {9, 33, 70},   {129, 65, 33},
                                              {64, 96, 128}, {257, 31, 17}, {200, 96, 128}};

// op(a) op(b) (+)= c0 by oneDNN at leading dimensions of the stored operands
// `pad` elements wider than their rows.
xt::xarray<float> onednn_padded(const xt::xarray<float>& a, bool ta, const xt::xarray<float>& b,
                                bool tb, const xt::xarray<float>& c0, bool accumulate, GemmDims d,
                                std::size_t pad) {
  const auto padded = [&](const xt::xarray<float>& m) {
    const std::size_t rows = m.shape()[0], cols = m.shape()[1];
    std::vector<float> out(rows * (cols + pad), -1e30f);  // poison: read past a row, it shows
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t j = 0; j < cols; ++j) out[i * (cols + pad) + j] = m(i, j);
    return out;
  };
  const std::vector<float> pa = padded(a), pb = padded(b);
  std::vector<float> pc = padded(c0);
  detail::onednn_gemm(pa.data(), a.shape()[1] + pad, ta, pb.data(), b.shape()[1] + pad, tb,
                      pc.data(), d.n + pad, d.m, d.n, d.k, accumulate);
  xt::xarray<float> c = xt::zeros<float>({d.m, d.n});
  for (std::size_t i = 0; i < d.m; ++i) {
    for (std::size_t j = 0; j < d.n; ++j) c(i, j) = pc[i * (d.n + pad) + j];
    for (std::size_t j = d.n; j < d.n + pad; ++j) CHECK(pc[i * (d.n + pad) + j] == -1e30f);
  }
  return c;
}

}  // namespace

TEST_CASE("gemm backend: oneDNN equals OpenBLAS for every transpose pair and beta") {
  if (!detail::onednn_compiled()) return;
  std::uint32_t seed = 1;
  for (const GemmDims& d : k_backend_dims)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (bool accumulate : {false, true})
          for (std::size_t pad : {0, 3}) {
            CAPTURE(d.m);
            CAPTURE(d.n);
            CAPTURE(d.k);
            CAPTURE(ta);
            CAPTURE(tb);
            CAPTURE(accumulate);
            CAPTURE(pad);
            const xt::xarray<float> a = ta ? random_array<float>({d.k, d.m}, seed++)
                                           : random_array<float>({d.m, d.k}, seed++);
            const xt::xarray<float> b = tb ? random_array<float>({d.n, d.k}, seed++)
                                           : random_array<float>({d.k, d.n}, seed++);
            const xt::xarray<float> c0 = random_array<float>({d.m, d.n}, seed++);
            xt::xarray<float> blas = c0;
            detail::blas_gemm<float>({a.data(), a.shape()[0], a.shape()[1]}, ta,
                                     {b.data(), b.shape()[0], b.shape()[1]}, tb,
                                     {blas.data(), d.m, d.n}, accumulate);
            const xt::xarray<float> onednn = onednn_padded(a, ta, b, tb, c0, accumulate, d, pad);
            const double tol = 2e-6 * (10.0 + d.k);  // check_gemm_all's float tolerance
            check_close(onednn, gemm_reference(a, ta, b, tb, c0, accumulate, d), tol, tol);
            check_close(onednn, blas, tol, tol);
          }
}

TEST_CASE("gemm backend: a large oneDNN product split over 2 threads gives 1 thread's bits") {
  if (!detail::onednn_compiled()) return;
  const int threads_before = get_num_threads();
  std::uint32_t seed = 100;
  // Past twice the per-part minimum: split by rows (M >= N), then by columns;
  // odd sizes leave tails in both parts.
  for (const GemmDims d : {GemmDims{515, 200, 257}, GemmDims{130, 777, 257}})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (bool accumulate : {false, true}) {
          CAPTURE(d.m);
          CAPTURE(d.n);
          CAPTURE(ta);
          CAPTURE(tb);
          CAPTURE(accumulate);
          const xt::xarray<float> a = ta ? random_array<float>({d.k, d.m}, seed++)
                                         : random_array<float>({d.m, d.k}, seed++);
          const xt::xarray<float> b = tb ? random_array<float>({d.n, d.k}, seed++)
                                         : random_array<float>({d.k, d.n}, seed++);
          const xt::xarray<float> c0 = random_array<float>({d.m, d.n}, seed++);
          set_num_threads(1);
          const xt::xarray<float> one = onednn_padded(a, ta, b, tb, c0, accumulate, d, 3);
          set_num_threads(2);
          const xt::xarray<float> two = onednn_padded(a, ta, b, tb, c0, accumulate, d, 3);
          CHECK(one == two);
          const double tol = 2e-6 * (10.0 + d.k);
          check_close(two, gemm_reference(a, ta, b, tb, c0, accumulate, d), tol, tol);
        }
  set_num_threads(threads_before);
}

TEST_CASE("gemm backend: a bias as oneDNN's argument gives the bits of beta = 1 onto it") {
  const int threads_before = get_num_threads();
  std::uint32_t seed = 300;
  // The char GPT's layers (K 128 and 512), a long K, a split by rows and one
  // by columns, and a product that stays on the small loop.
  for (const GemmDims d :
       {GemmDims{4096, 384, 128}, GemmDims{4096, 128, 512}, GemmDims{200, 96, 2048},
        GemmDims{130, 777, 257}, GemmDims{40, 50, 60}, GemmDims{16, 16, 16}})
    for (bool tb : {false, true})
      for (int threads : {1, 2})
        for (MatmulPrecision precision : {MatmulPrecision::highest, MatmulPrecision::bf16}) {
          if (!matmul_precision_supported(precision)) continue;
          set_matmul_precision(precision);
          CAPTURE(d.m);
          CAPTURE(d.n);
          CAPTURE(d.k);
          CAPTURE(tb);
          CAPTURE(threads);
          set_num_threads(threads);
          const xt::xarray<float> a = random_array<float>({d.m, d.k}, seed++);
          const xt::xarray<float> b = tb ? random_array<float>({d.n, d.k}, seed++)
                                         : random_array<float>({d.k, d.n}, seed++);
          const xt::xarray<float> bias = random_array<float>({d.n}, seed++);
          const detail::MatrixRef<const float> ma{a.data(), d.m, d.k};
          const detail::MatrixRef<const float> mb{b.data(), b.shape()[0], b.shape()[1]};
          xt::xarray<float> fused = xt::zeros<float>({d.m, d.n});
          xt::xarray<float> written = xt::zeros<float>({d.m, d.n});
          detail::gemm_bias<float>("test", ma, false, mb, tb, {fused.data(), d.m, d.n},
                                   bias.data());
          detail::broadcast_rows(bias.data(), written.data(), d.m, d.n);
          detail::gemm<float>("test", ma, false, mb, tb, {written.data(), d.m, d.n}, true);
          CHECK(fused == written);
        }
  set_matmul_precision(MatmulPrecision::highest);
  set_num_threads(threads_before);
}

TEST_CASE("gemm backend: detail::gemm on each backend equals a scalar loop") {
  for (GemmBackend backend : {GemmBackend::onednn, GemmBackend::openblas}) {
    if (!gemm_backend_available(backend)) continue;
    const BackendScope scope(backend);
    std::uint32_t seed = 100;
    for (const GemmDims& d : k_backend_dims) check_gemm_all<float>(d, seed);
    check_gemm_all<float>({3, 700, 40}, seed);   // few rows: the streaming path
    check_gemm_all<float>({16, 8, 16}, seed);    // small: xtgrad's own loop
    check_gemm_all<double>({40, 50, 60}, seed);  // double: OpenBLAS on either
  }
}

TEST_CASE("gemm backend: empty products on oneDNN") {
  if (!detail::onednn_compiled()) return;
  const BackendScope scope(GemmBackend::onednn);
  const std::vector<float> a(40 * 30, 1.0f), b(30 * 50, 1.0f);
  for (bool accumulate : {false, true}) {
    std::vector<float> c(40 * 50, 7.0f);
    detail::gemm<float>("test", {a.data(), 0, 30}, false, {b.data(), 30, 50}, false,
                        {c.data(), 0, 50}, accumulate);  // 0 rows
    detail::gemm<float>("test", {a.data(), 40, 30}, false, {b.data(), 30, 0}, false,
                        {c.data(), 40, 0}, accumulate);  // 0 columns
    CHECK(c == std::vector<float>(40 * 50, 7.0f));
    detail::gemm<float>("test", {a.data(), 40, 0}, false, {b.data(), 0, 50}, false,
                        {c.data(), 40, 50}, accumulate);  // k = 0: an empty sum
    CHECK(c == std::vector<float>(40 * 50, accumulate ? 7.0f : 0.0f));
  }
}

TEST_CASE("gemm backend: two threads run oneDNN products concurrently, each its own primitives") {
  if (!detail::onednn_compiled()) return;
  const int threads_before = get_num_threads();
  set_num_threads(2);
  const GemmDims d{96, 80, 64};
  const xt::xarray<float> a = random_array<float>({d.m, d.k}, 1);
  const xt::xarray<float> b = random_array<float>({d.n, d.k}, 2);
  const xt::xarray<float> zero = xt::zeros<float>({d.m, d.n});
  const xt::xarray<double> expected = gemm_reference(a, false, b, true, zero, false, d);
  std::vector<xt::xarray<float>> results(2, zero);
  std::vector<std::size_t> cached(2);
  std::vector<std::thread> workers;
  for (std::size_t t = 0; t < 2; ++t)
    workers.emplace_back([&, t] {
      for (int r = 0; r < 50; ++r)
        detail::onednn_gemm(a.data(), d.k, false, b.data(), d.k, true, results[t].data(), d.n, d.m,
                            d.n, d.k, false);
      cached[t] = detail::onednn_cached_primitives();
    });
  for (std::thread& w : workers) w.join();
  for (std::size_t t = 0; t < 2; ++t) {
    check_close(results[t], expected, 1e-4, 1e-4);
    CHECK(cached[t] == 1);
  }
  set_num_threads(threads_before);
}

TEST_CASE("gemm backend: a primitive per shape, transposes, beta and thread count, reused") {
  if (!detail::onednn_compiled()) return;
  std::size_t result = 0;
  std::thread([&] {  // a fresh thread: an empty cache
    const std::vector<float> a(100 * 64, 0.5f), b(64 * 64, 0.25f);
    std::vector<float> c(100 * 64);
    const auto run = [&](std::size_t m, bool ta, bool accumulate) {
      detail::onednn_gemm(a.data(), 64, ta, b.data(), 64, false, c.data(), 64, m, 64, 64,
                          accumulate);
    };
    run(64, false, false);
    run(64, false, false);
    CHECK(detail::onednn_cached_primitives() == 1);
    run(32, false, false);
    run(64, true, false);
    run(64, false, true);
    CHECK(detail::onednn_cached_primitives() == 4);
    CHECK(c[0] == doctest::Approx(64 * 0.5 * 0.25 * 2));  // accumulated onto the last product
    for (std::size_t m = 1; m <= 100; ++m) run(m, false, false);
    result = detail::onednn_cached_primitives();
  })
      .join();
  CHECK(result == 64);  // the least recently used are dropped
}

TEST_CASE("gemm backend: the choice, its availability and its description") {
  CHECK(gemm_backend_available(GemmBackend::openblas));
  CHECK(gemm_backend_available(GemmBackend::onednn) == detail::onednn_compiled());
  CHECK(get_gemm_backend() ==
        (detail::onednn_compiled() ? GemmBackend::onednn : GemmBackend::openblas));
  {
    const BackendScope scope(GemmBackend::openblas);
    CHECK(get_gemm_backend() == GemmBackend::openblas);
    const std::string info = gemm_backend_info();
    CHECK(info.rfind("OpenBLAS ", 0) == 0);
    CHECK(info.find("(" + detail::openblas_core() + ")") != std::string::npos);
  }
  if (detail::onednn_compiled()) {
    const BackendScope scope(GemmBackend::onednn);
    const std::string info = gemm_backend_info();
    CHECK(info.rfind("oneDNN ", 0) == 0);
    CHECK(info.find('(') != std::string::npos);
  } else {
    CHECK_THROWS_WITH_AS(set_gemm_backend(GemmBackend::onednn),
                         "xtgrad::set_gemm_backend: argument 'backend' is oneDNN, which this "
                         "build does not include (configure with XTGRAD_ONEDNN=ON)",
                         std::invalid_argument);
  }
}

TEST_CASE("gemm backend: the stale-kernel warning names the core, the CPU's ISA and the fix") {
  using detail::VectorIsa;
  const std::string haswell = detail::stale_kernel_warning("Haswell", VectorIsa::avx512);
  CHECK(haswell.find("\"Haswell\" kernels (AVX2)") != std::string::npos);
  CHECK(haswell.find("a CPU with AVX-512") != std::string::npos);
  CHECK(haswell.find("OPENBLAS_CORETYPE=SkylakeX") != std::string::npos);
  CHECK(haswell.find("oneDNN") != std::string::npos);
  const std::string prescott = detail::stale_kernel_warning("Prescott", VectorIsa::avx512);
  CHECK(prescott.find("\"Prescott\" kernels (SSE)") != std::string::npos);
  CHECK(
      detail::stale_kernel_warning("Prescott", VectorIsa::avx2).find("OPENBLAS_CORETYPE=Haswell") !=
      std::string::npos);
  CHECK(detail::stale_kernel_warning("SkylakeX", VectorIsa::avx512).empty());
  CHECK(detail::stale_kernel_warning("Haswell", VectorIsa::avx2).empty());
  CHECK(detail::stale_kernel_warning("Zen", VectorIsa::avx2).empty());
  CHECK(detail::stale_kernel_warning("SomeFutureCore", VectorIsa::avx512).empty());
  CHECK(detail::stale_kernel_warning("Haswell", VectorIsa::unknown).empty());
  CHECK(detail::openblas_core_isa(detail::openblas_core()) != VectorIsa::unknown);
}
