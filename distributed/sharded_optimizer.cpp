#include "sharded_optimizer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "../engine/errors.hpp"
#include "mpi_type.hpp"

namespace xtgrad::distributed {

namespace {

constexpr const char* k_sharded_name = "distributed::ShardedOptimizer";
constexpr double k_clip_eps = 1e-6;  // optim::clip_grad_norm's constant

template <class T>
std::vector<std::size_t> sizes_of(const GradientSynchronizer<T>& sync) {
  std::vector<std::size_t> out;
  for (const Parameter<T>* p : sync.parameters()) out.push_back(p->value.size());
  return out;
}

std::uint64_t fnv(std::uint64_t h, std::uint64_t v) {
  for (int k = 0; k < 8; ++k) h = (h ^ ((v >> (8 * k)) & 0xffu)) * 1099511628211ull;
  return h;
}

}  // namespace

template <class T>
ShardedOptimizer<T>::ShardedOptimizer(GradientSynchronizer<T>& sync,
                                      std::vector<std::vector<Parameter<T>*>> groups,
                                      std::vector<double> lrs, ZeroOptions zero,
                                      const Factory& factory)
    : optim::Optimizer<T>("ShardedOptimizer", std::move(groups), std::move(lrs)),
      sync_(sync),
      zero_(zero),
      layout_(sizes_of(sync), sync.buckets(),
              static_cast<std::size_t>(sync.communicator().size())) {
  if (zero.stage != 1 && zero.stage != 2)
    xtgrad::detail::fail_argument(k_sharded_name, "zero.stage",
                                  "is " + std::to_string(zero.stage) + ", expected 1 or 2");
  match_parameters();
  inner_ = factory(shard_groups());  // the wrapped optimizer's own checks
  check_groups_agree();
  sync.reduce_scatter({layout_.counts(), zero.stage == 2});
}

template <class T>
void ShardedOptimizer<T>::match_parameters() {
  const auto& mine = this->parameters();
  const auto& synced = sync_.parameters();
  std::unordered_map<const Parameter<T>*, std::size_t> position;
  for (std::size_t i = 0; i < mine.size(); ++i) position.emplace(mine[i], i);
  for (const Parameter<T>* p : synced)
    if (position.count(p) == 0)
      xtgrad::detail::fail_argument(
          k_sharded_name, "groups",
          "miss the synchronizer's parameter " + xtgrad::detail::quoted(p->name) +
              "; shard the optimizer of exactly the synchronizer's parameters");
  const std::unordered_set<const Parameter<T>*> held(synced.begin(), synced.end());
  for (std::size_t i = 0; i < mine.size(); ++i)
    if (held.count(mine[i]) == 0) local_.push_back(i);
  if (!zero_.rank_local && mine.size() != synced.size())
    xtgrad::detail::fail_argument(
        k_sharded_name, "groups",
        "hold " + std::to_string(mine.size()) + " parameters, but the synchronizer holds " +
            std::to_string(synced.size()) + "; shard the optimizer of exactly its parameters");
  if (layout_.elements() < layout_.ranks())
    xtgrad::detail::fail_argument(
        k_sharded_name, "sync",
        "holds " + std::to_string(layout_.elements()) + " elements, fewer than the " +
            std::to_string(layout_.ranks()) + " ranks to shard them over");
  for (const Parameter<T>* p : synced) index_in_optimizer_.push_back(position.at(p));
}

template <class T>
std::vector<std::vector<Parameter<T>*>> ShardedOptimizer<T>::shard_groups() {
  // This rank's pieces, grouped as the optimizer's groups, in flat order.
  const auto& synced = sync_.parameters();
  const std::vector<detail::ShardPiece> flat = layout_.pieces(rank());
  const std::size_t groups = this->group_count();
  std::vector<std::vector<Parameter<T>*>> out(local_.empty() ? groups : 2 * groups);
  for (std::size_t g = 0; g < groups; ++g)
    for (const detail::ShardPiece& piece : flat) {
      if (this->group_of(index_in_optimizer_[piece.parameter]) != g) continue;
      const Parameter<T>& p = *synced[piece.parameter];
      xt::xarray<T> value = xt::zeros<T>({piece.length});
      std::copy_n(p.value.data() + piece.offset, piece.length, value.data());
      piece_params_.push_back(
          std::make_unique<Parameter<T>>(p.name + "[" + std::to_string(piece.offset) + ":" +
                                             std::to_string(piece.offset + piece.length) + "]",
                                         std::move(value)));
      pieces_.push_back(piece);
      out[g].push_back(piece_params_.back().get());
    }
  // The rank-local parameters whole, group g's in group groups + g.
  for (const std::size_t i : local_)
    out[groups + this->group_of(i)].push_back(this->parameters()[i]);
  return out;
}

template <class T>
void ShardedOptimizer<T>::check_groups_agree() const {
  std::uint64_t h = fnv(1469598103934665603ull, static_cast<std::uint64_t>(zero_.stage));
  h = fnv(h, zero_.rank_local ? 1 : 0);
  for (const std::size_t j : index_in_optimizer_) h = fnv(h, this->group_of(j));
  const std::vector<std::uint64_t> hashes = sync_.communicator().all_gather(h);
  for (std::size_t r = 1; r < hashes.size(); ++r)
    if (hashes[r] != hashes[0])
      xtgrad::detail::fail_argument(
          k_sharded_name, "groups",
          "differ across ranks: rank " + std::to_string(r) +
              " assigns the parameters to groups (or chose a stage) unlike rank 0");
}

template <class T>
void ShardedOptimizer<T>::pull_gradients() {
  sync_.finish();
  if (sync_.rounds() == pulled_round_) return;
  pulled_round_ = sync_.rounds();
  const auto counts = layout_.counts();
  const T ranks = static_cast<T>(layout_.ranks());
  for (std::size_t i = 0; i < pieces_.size(); ++i) {
    const detail::ShardPiece& piece = pieces_[i];
    const std::vector<T>& shard = sync_.shard(piece.bucket);
    const auto& members = sync_.buckets()[piece.bucket];
    const std::size_t member = static_cast<std::size_t>(
        std::find(members.begin(), members.end(), piece.parameter) - members.begin());
    Parameter<T>& p = *piece_params_[i];
    p.has_grad = shard[static_cast<std::size_t>(counts[piece.bucket][rank()]) + member] > T(0);
    p.grad.resize({piece.length});
    T* g = p.grad.data();
    const T* sum = shard.data() + piece.at;
    if (!p.has_grad)
      std::fill(g, g + piece.length, T(0));
    else
      for (std::size_t k = 0; k < piece.length; ++k) g[k] = sum[k] / ranks;  // the mean over ranks
  }
}

template <class T>
void ShardedOptimizer<T>::step() {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  pull_gradients();
  const auto& synced = sync_.parameters();
  for (std::size_t i = 0; i < pieces_.size(); ++i) {
    const Parameter<T>& p = *synced[pieces_[i].parameter];
    if (p.value.size() != layout_.size(pieces_[i].parameter))
      xtgrad::detail::fail_logic(k_sharded_name + std::string("::step"),
                                 "parameter " + xtgrad::detail::quoted(p.name) +
                                     " changed its size since the optimizer was built");
    std::copy_n(p.value.data() + pieces_[i].offset, pieces_[i].length,
                piece_params_[i]->value.data());
    piece_params_[i]->mark_changed();
  }
  // (the rank-local parameters' groups after the pieces' take their groups' rates)
  for (std::size_t g = 0; g < inner_->group_count(); ++g)
    inner_->set_lr(g, this->lr(g % this->group_count()));
  const auto inner_start = Clock::now();
  inner_->step();
  stats_.optimizer_seconds = std::chrono::duration<double>(Clock::now() - inner_start).count();
  for (auto& piece : piece_params_) piece->has_grad = false;  // used; a new backward brings more
  const auto updated = Clock::now();
  all_gather();
  stats_.update_seconds = std::chrono::duration<double>(updated - start).count();
  stats_.all_gather_seconds = std::chrono::duration<double>(Clock::now() - updated).count();
}

template <class T>
void ShardedOptimizer<T>::all_gather() {
  const auto counts = layout_.counts();
  const auto& synced = sync_.parameters();
  const MPI_Comm comm = sync_.communicator().comm();
  std::vector<int> displs(layout_.ranks());
  for (std::size_t b = 0; b < layout_.bucket_count(); ++b) {
    const std::size_t base = layout_.bucket_begin(b);
    gather_.resize(layout_.bucket_size(b));
    for (std::size_t k = 0; k < pieces_.size(); ++k) {
      const detail::ShardPiece& piece = pieces_[k];
      if (piece.bucket != b) continue;
      std::copy_n(piece_params_[k]->value.data(), piece.length,
                  gather_.data() + (layout_.flat_begin(piece.parameter) + piece.offset - base));
    }
    int at = 0;
    for (std::size_t r = 0; r < layout_.ranks(); ++r) displs[r] = at, at += counts[b][r];
    detail::check_mpi(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, gather_.data(),
                                     counts[b].data(), displs.data(), detail::mpi_type<T>(), comm),
                      "MPI_Allgatherv (updated parameters)");
    for (const std::size_t j : sync_.buckets()[b]) {
      std::copy_n(gather_.data() + (layout_.flat_begin(j) - base), synced[j]->value.size(),
                  synced[j]->value.data());
      synced[j]->mark_changed();
    }
  }
  if (zero_.stage == 2) std::vector<T>().swap(gather_);
}

template <class T>
void ShardedOptimizer<T>::zero_grad() {
  for (auto& piece : piece_params_) piece->zero_grad();
  if (zero_.stage == 1) {
    optim::Optimizer<T>::zero_grad();
    return;
  }
  for (Parameter<T>* p : this->parameters()) {  // released, not zero-filled
    p->grad = xt::xarray<T>::from_shape({0});
    p->has_grad = false;
  }
}

template <class T>
double ShardedOptimizer<T>::clip_grad_norm(double max_norm, double norm_type) {
  const char* op = "ShardedOptimizer::clip_grad_norm";
  optim::detail::require(!std::isnan(max_norm) && max_norm >= 0.0, op, "max_norm", ">= 0",
                         max_norm);
  optim::detail::require(!std::isnan(norm_type) && norm_type > 0.0, op, "norm_type",
                         "> 0 (or infinity)", norm_type);
  pull_gradients();
  const bool infinity = std::isinf(norm_type);
  // This rank's share of the sum: its pieces, and its rank-local parameters
  // (each rank's own: every one is counted once over the ranks).
  std::vector<Parameter<T>*> shard;
  for (const auto& piece : piece_params_) shard.push_back(piece.get());
  for (const std::size_t i : local_) shard.push_back(this->parameters()[i]);
  double acc = 0.0, nan = 0.0;
  for (const Parameter<T>* p : shard) {
    if (!p->has_grad) continue;
    for (const T g : p->grad) {
      const double a = std::abs(static_cast<double>(g));
      if (std::isnan(a)) nan = 1.0;
      if (infinity)
        acc = std::max(acc, a);
      else
        acc += norm_type == 2.0 ? a * a : norm_type == 1.0 ? a : std::pow(a, norm_type);
    }
  }
  double local[2] = {acc, nan}, global[2] = {0.0, 0.0};
  detail::check_mpi(MPI_Allreduce(local, global, 2, MPI_DOUBLE, infinity ? MPI_MAX : MPI_SUM,
                                  sync_.communicator().comm()),
                    "MPI_Allreduce (gradient norm)");
  if (global[1] > 0.0) return std::numeric_limits<double>::quiet_NaN();
  const double total = infinity || norm_type == 1.0 ? global[0]
                       : norm_type == 2.0           ? std::sqrt(global[0])
                                                    : std::pow(global[0], 1.0 / norm_type);
  if (!std::isfinite(total)) return total;
  const double clip_coef = max_norm / (total + k_clip_eps);
  if (clip_coef < 1.0)
    for (Parameter<T>* p : shard)
      if (p->has_grad) p->grad *= static_cast<T>(clip_coef);
  return total;
}

template <class T>
void ShardedOptimizer<T>::agree(const std::function<void()>& check, const char* function) const {
  const Communicator& comm = sync_.communicator();
  std::string error;
  try {
    check();
  } catch (const std::exception& e) {
    error = e.what();
  }
  const std::vector<std::uint64_t> failed = comm.all_gather(error.empty() ? 0 : 1);
  for (std::size_t r = 0; r < failed.size(); ++r)
    if (failed[r] != 0) {
      const std::string message = comm.broadcast(error, static_cast<int>(r));
      throw std::invalid_argument(message + " (" + function + " on rank " + std::to_string(r) +
                                  "; nothing was loaded on any rank)");
    }
}

template <class T>
std::size_t ShardedOptimizer<T>::state_bytes() const {
  std::size_t bytes = 0;
  for (const auto& entry : inner_->state_dict().arrays) bytes += entry.second.size() * sizeof(T);
  return bytes;
}

template class ShardedOptimizer<float>;
template class ShardedOptimizer<double>;

}  // namespace xtgrad::distributed
