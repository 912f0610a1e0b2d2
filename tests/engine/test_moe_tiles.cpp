// The cut of the mixture-of-experts kernels (engine/kernels/moe_kernels.hpp):
// experts run in tiles of k_moe_tile_rows rows with a zero-padded last tile,
// or as one product each; both cuts, and the expert-parallel row kernels,
// give the same values and gradients (double, 1e-12).

#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <limits>
#include <vector>

#include <xtgrad/engine/engine.hpp>
#include <xtgrad/engine/kernels/moe_kernels.hpp>

#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;

namespace {

using Array = xt::xarray<double>;

// y and every gradient of one call of the kernels.
struct Result {
  Array y, saved, dx, dweights;
  std::vector<Array> dw;  // dw1, dw3, dw2 of each expert in turn
};

struct Problem {
  std::size_t n = 150, c = 6, h = 10, e = 4, k = 2;
  MoeRouting routing;
  Array x, weights, dy;
  std::vector<Array> w;  // w1, w3 [H, C], w2 [C, H] of each expert in turn
  std::vector<detail::MoeExpertWeights<double>> experts;

  Problem() {
    // Expert 3 is nearly never chosen (a last tile of a few rows, unpadded);
    // the others get about 100 rows (a whole tile and a padded one).
    Array probs = random_array({n, e}, 1, 0.0, 1.0);
    for (std::size_t t = 5; t < n; ++t) probs(t, 3) = 0.0;
    routing = moe_route(probs, k);
    x = random_array({n, c}, 2);
    weights = random_array({n, k}, 3);
    dy = random_array({n, c}, 4);
    for (std::size_t j = 0; j < e; ++j) {
      w.push_back(random_array({h, c}, 10 + std::uint32_t(j), -0.5, 0.5));
      w.push_back(random_array({h, c}, 20 + std::uint32_t(j), -0.5, 0.5));
      w.push_back(random_array({c, h}, 30 + std::uint32_t(j), -0.5, 0.5));
    }
    for (std::size_t j = 0; j < e; ++j)
      experts.push_back({w[3 * j].data(), w[3 * j + 1].data(), w[3 * j + 2].data()});
  }

  detail::MoeExpertSet<double> set(std::size_t tile_macs) const {
    return {Activation::silu, c, h, routing.offsets, experts, tile_macs};
  }

  Result run(std::size_t tile_macs) const {
    const std::size_t rows = routing.rows();
    Result r{Array::from_shape({n, c}),
             Array::from_shape({detail::MoeHidden<double>::size(rows, h)}),
             Array::from_shape({n, c}),
             Array::from_shape({n, k}),
             {}};
    const auto saved = detail::MoeHidden<double>::in(r.saved.data(), rows, h);
    detail::moe_experts_forward("test", routing, set(tile_macs), x.data(), weights.data(), saved,
                                r.y.data());
    std::vector<detail::MoeGradTarget<double>> targets(3 * e);
    detail::MoeGradTarget<double> dx{r.dx.data(), r.dx.size(), false};
    detail::MoeGradTarget<double> dweights{r.dweights.data(), r.dweights.size(), false};
    detail::MoeGrads<double> grads{&dx, &dweights, {}};
    r.dw.resize(3 * e);
    for (std::size_t i = 0; i < 3 * e; ++i) {
      r.dw[i] = Array::from_shape(w[i].shape());
      targets[i] = {r.dw[i].data(), r.dw[i].size(), false};
      auto& role = i % 3 == 0   ? grads.experts.dw1
                   : i % 3 == 1 ? grads.experts.dw3
                                : grads.experts.dw2;
      role.push_back(&targets[i]);
    }
    detail::moe_experts_backward("test", routing, set(tile_macs), x.data(), weights.data(),
                                 detail::MoeHidden<const double>::in(r.saved.data(), rows, h),
                                 dy.data(), grads);
    return r;
  }
};

constexpr std::size_t k_all = std::numeric_limits<std::size_t>::max();

}  // namespace

TEST_CASE("moe kernels: tiles with a padded last tile equal one product per expert") {
  const Problem p;
  CHECK(p.routing.counts[0] > detail::k_moe_tile_rows);
  CHECK(p.routing.counts[3] <= 8);  // the few-rows GEMM's rows (kernels/gemm_streaming.hpp)
  const Result tiled = p.run(k_all), whole = p.run(0);
  check_close(tiled.y, whole.y);
  check_close(tiled.saved, whole.saved);
  check_close(tiled.dx, whole.dx);
  check_close(tiled.dweights, whole.dweights);
  for (std::size_t i = 0; i < tiled.dw.size(); ++i) check_close(tiled.dw[i], whole.dw[i]);
}

TEST_CASE("moe kernels: the expert-parallel row kernels equal the routed ones, both cuts") {
  const Problem p;
  const Result routed = p.run(0);
  const std::size_t rows = p.routing.rows(), c = p.c, h = p.h;
  const auto in = detail::MoeHidden<const double>::in(routed.saved.data(), rows, h);
  // the rows as buffers: x's and dy's rows, and each row's weight
  const double* const none = nullptr;
  Array x_rows = Array::from_shape({rows, c}), d_out = x_rows, w = Array::from_shape({rows});
  detail::moe_gather_rows(p.routing, c, p.x.data(), none, 0, rows, x_rows.data());
  detail::moe_gather_rows(p.routing, c, p.dy.data(), none, 0, rows, d_out.data());
  for (std::size_t i = 0; i < rows; ++i) w(i) = p.weights.data()[p.routing.source[i]];
  for (const std::size_t tile_macs : {k_all, std::size_t(0)}) {
    Array g = Array::from_shape({rows, h}), u = g, o = Array::from_shape({rows, c});
    detail::moe_expert_rows_forward<double>("test", p.set(tile_macs),
                                            {x_rows.data(), g.data(), u.data(), o.data()});
    Array y = xt::zeros<double>({p.n, c});
    detail::moe_scatter_rows(p.routing, c, o.data(), p.weights.data(), 0, rows, y.data());
    check_close(y, routed.y);
    std::vector<Array> dw;
    std::vector<detail::MoeGradTarget<double>> targets(3 * p.e);
    detail::MoeWeightGrads<double> grads;
    for (std::size_t i = 0; i < 3 * p.e; ++i) {
      dw.push_back(Array::from_shape(p.w[i].shape()));
      targets[i] = {dw[i].data(), dw[i].size(), false};
      (i % 3 == 0 ? grads.dw1 : i % 3 == 1 ? grads.dw3 : grads.dw2).push_back(&targets[i]);
    }
    Array dx_rows = Array::from_shape({rows, c}), dx = xt::zeros<double>({p.n, c});
    Array dw_rows = Array::from_shape({rows}), dweights = xt::zeros<double>({p.n, p.k});
    detail::moe_expert_rows_backward<double>("test", p.set(tile_macs),
                                             {x_rows.data(), in.g, in.u, nullptr}, d_out.data(),
                                             w.data(), grads, dx_rows.data(), dw_rows.data());
    detail::moe_scatter_rows(p.routing, c, dx_rows.data(), p.weights.data(), 0, rows, dx.data());
    for (std::size_t i = 0; i < rows; ++i) dweights.data()[p.routing.source[i]] = dw_rows(i);
    check_close(dx, routed.dx);
    check_close(dweights, routed.dweights);
    for (std::size_t i = 0; i < dw.size(); ++i) check_close(dw[i], routed.dw[i]);
  }
}
