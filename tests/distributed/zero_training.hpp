#pragma once
// The training run of the ZeRO tests (test_zero.cpp, zero_checkpoint.cpp):
// a GatedFFN (184 parameters in several small buckets, so that shard
// boundaries cut parameters), AdamW with two parameter groups (matrices:
// weight decay 0.1; vectors: no decay, other betas, amsgrad), gradient
// clipping by the global norm (active: max_norm below the gradients'
// norm), a cosine schedule, mean-squared error on a fixed global batch of
// 48 rows (a multiple of 1, 2, 3 and 4).
//
// Modes: one process on the whole batch (the reference, no MPI), today's
// data-parallel (GradientSynchronizer + AdamW + optim::clip_grad_norm), and
// ZeRO stage 1 and 2 (ShardedOptimizer), each rank on its 48 / P rows.
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include <xtensor/xview.hpp>
#include <xtgrad/distributed/distributed.hpp>
#include <xtgrad/engine/engine.hpp>
#include <xtgrad/modules/modules.hpp>
#include <xtgrad/optim/optim.hpp>

#include "support/module_compare.hpp"
#include "support/test_helpers.hpp"

namespace xtgrad::testing::zero {

enum class Mode { one_process, ddp, zero1, zero2 };

constexpr std::size_t k_batch = 48, k_in = 6, k_hidden = 10, k_out = 4;
constexpr double k_max_norm = 0.01;

template <class T>
std::vector<optim::AdamWParamGroup<T>> groups(Module<T>& model) {
  std::vector<Parameter<T>*> matrices, vectors;
  for (Parameter<T>* p : model.parameters())
    (p->value.dimension() == 2 ? matrices : vectors).push_back(p);
  return {{matrices, optim::AdamWOptions(2e-2).weight_decay(0.1)},
          {vectors, optim::AdamWOptions(1e-2).weight_decay(0.0).betas({0.8, 0.99}).amsgrad(true)}};
}

template <class T>
struct Run {
  Mode mode;
  std::unique_ptr<GatedFFN<T>> model;
  std::unique_ptr<distributed::GradientSynchronizer<T>> sync;
  std::unique_ptr<optim::Optimizer<T>> opt;
  std::unique_ptr<optim::LRScheduler<T>> schedule;
  Tape<T> tape;
  xt::xarray<T> x, y;

  // comm may be null for one_process. Every rank starts from rank 0's
  // initialization (each builds from its own seed, then the broadcast).
  Run(Mode m, distributed::Communicator* comm) : mode(m) {
    const int P = comm ? comm->size() : 1, r = comm ? comm->rank() : 0;
    Generator g(m == Mode::one_process ? 5 : 5 + 100 * static_cast<std::uint64_t>(r));
    model =
        std::make_unique<GatedFFN<T>>(k_in, k_hidden, k_out, Activation::silu, GatedBias::all(), g);
    const xt::xarray<T> gx = random_array<T>({k_batch, k_in}, 21);
    const xt::xarray<T> gy = random_array<T>({k_batch, k_out}, 22);
    const std::size_t rows = k_batch / static_cast<std::size_t>(P);
    const std::size_t first = rows * static_cast<std::size_t>(r);
    x = xt::view(gx, xt::range(first, first + rows));
    y = xt::view(gy, xt::range(first, first + rows));
    if (m != Mode::one_process) {
      distributed::broadcast_parameters(*comm, *model);
      sync = std::make_unique<distributed::GradientSynchronizer<T>>(
          *comm, *model, distributed::SynchronizerOptions().first_bucket(64).bucket(256));
      sync->attach(tape);
    }
    if (m == Mode::zero1 || m == Mode::zero2)
      opt = std::make_unique<distributed::ShardedOptimizer<T>>(
          *sync, groups(*model), distributed::ZeroOptions{m == Mode::zero1 ? 1 : 2});
    else
      opt = std::make_unique<optim::AdamW<T>>(groups(*model));
    schedule = std::make_unique<optim::CosineAnnealingLR<T>>(*opt, 40, 1e-4);
  }
  ~Run() {
    if (sync) sync->detach();
  }

  distributed::ShardedOptimizer<T>& sharded() {
    return dynamic_cast<distributed::ShardedOptimizer<T>&>(*opt);
  }

  // One step; returns the gradients' norm before clipping.
  double step() {
    tape.clear();
    opt->zero_grad();
    tape.backward(mse((*model)(tape.leaf(x, false)), tape.leaf(y, false)));
    double norm = 0.0;
    if (mode == Mode::zero1 || mode == Mode::zero2) {
      norm = sharded().clip_grad_norm(k_max_norm);
    } else {
      if (sync) sync->finish();
      norm = optim::clip_grad_norm(opt->parameters(), k_max_norm);
    }
    opt->step();
    schedule->step();
    return norm;
  }
  void steps(int n) {
    for (int s = 0; s < n; ++s) step();
  }
};

// Copies b's values into a.
template <class T>
void copy_values(Module<T>& a, Module<T>& b) {
  const auto pa = a.parameters(), pb = b.parameters();
  for (std::size_t k = 0; k < pa.size(); ++k) pa[k]->value = pb[k]->value;
}

// 50 steps of AdamW (clipped, two groups, a schedule) in double: P ranks to
// <= 1e-12 relative of one process; in float to rounding: every gradient is
// divided by its own running RMS, so the rounding of the sums (the shards'
// means summed in another order, the norm too) reaches the parameters at
// lr * (a few ulp) per step; 2e-6 relative to the largest element of each
// parameter is ~30 float ulps (2-8e-7 measured at 2 to 4 ranks).
template <class T>
double bound() {
  return std::is_same_v<T, float> ? 2e-6 : 1e-12;
}

}  // namespace xtgrad::testing::zero
