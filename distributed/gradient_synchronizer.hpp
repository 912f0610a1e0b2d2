#pragma once
// GradientSynchronizer<T>: averages the gradients of a model's Parameters
// over the ranks of a Communicator during the reverse pass, the reducer of
// torch.nn.parallel.DistributedDataParallel (torch/csrc/distributed/c10d/
// reducer.cpp) on a tape.
//
// Buckets: the parameters, in reverse order of the list given (the reverse
// pass produces the last ones first), are packed into buckets of about
// first_bucket_bytes (the first, 1 MiB by default) and then bucket_bytes
// (25 MiB), as DDP's compute_bucket_assignment_by_size does: a bucket is
// closed once it reaches its limit, so it may exceed it by one parameter. A
// bucket is one contiguous buffer: the gradients of its parameters back to
// back, then one slot per parameter counting the ranks that produced a
// gradient for it, so that one in-place MPI_Allreduce(MPI_SUM) per bucket
// moves everything. (A Parameter's grad is its own xt::xarray, so a
// gradient is copied into its bucket when final and the average copied
// back in finish(), as DDP does with gradient_as_bucket_view=False; the
// copies are memory-bound passes, small beside the GEMMs that produced the
// gradients.)
//
// Overlap: attach(tape) adds the synchronizer as the tape's
// BackwardObserver. At the start of a backward it finds, from the recording,
// which of its Parameters the root reaches and the earliest node reading
// each; a Parameter is final once that node's backward ran (node_done). When
// all parameters of a bucket are final the bucket goes to the communication
// thread, which issues the all-reduces in bucket order, one at a time,
// blocking and in place, while the main thread continues the reverse pass.
// (Open MPI makes no progress on a non-blocking all-reduce unless some
// thread calls into MPI, so the thread blocks in MPI_Allreduce instead.) The
// communication thread touches the bucket buffers only, never the tape or a
// Parameter. Parameters the root does not reach are final at once: their
// gradient (zero unless accumulated before) is all-reduced like the others,
// so every rank issues the same calls and an unused parameter never stalls
// a step. overlap = false hands every bucket over when the backward ends.
// A backward through expert-parallel nodes (k_moe_experts_all_to_all,
// expert_parallel.hpp), whose all-to-alls run on the main thread, hands no
// bucket over before the last of them ran (MPI_THREAD_SERIALIZED).
//
// Module form: the module's parameters but the sharded experts'
// (replicated_parameters, expert_parallel.hpp), which are each rank's own.
//
// finish() waits for the last bucket, writes grad = (sum over ranks) / size
// into every Parameter, sets has_grad when some rank produced a gradient
// (a parameter no rank used keeps has_grad false and a zero grad, so an
// optimizer skips it as in one process), and rethrows an MPI error of the
// communication thread. Call it after backward and before optimizer.step().
//
// Why averaging: each rank's loss is the mean over its local batch of b
// rows; with P ranks holding equal shards of a global batch of B = P b rows,
// (1/P) sum_r d(mean_r)/dtheta = d(mean over B)/dtheta: the gradient of the
// global mean, the same as one process on the whole batch, up to the
// rounding of the sum's order.
//
// Reduce-scatter mode (ZeRO, sharded_optimizer.hpp): after
// reduce_scatter(plan) each bucket goes through one MPI_Reduce_scatter over
// its gradients (rank r receiving the plan's counts[bucket][r] contiguous
// elements, in rank order) and one MPI_Allreduce of its per-parameter
// counts, instead of the one all-reduce: the same bytes on the wire. finish()
// then leaves the Parameters alone and the sums in shard(bucket): this
// rank's elements, then the bucket's counts. With plan.release_gradients a
// Parameter's grad is released (empty, has_grad false) once copied into its
// bucket, and a bucket's buffer once reduced (ZeRO stage 2).
//
// One round per backward: a backward that reaches this synchronizer's
// Parameters while a round is in flight (no finish() since the last one) is
// refused with std::logic_error before anything is written. A backward that
// reaches none of them is ignored (several models on one tape each have a
// synchronizer). Every rank must run the same backward calls.

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "../engine/tape.hpp"
#include "../modules/module.hpp"
#include "broadcast.hpp"
#include "communicator.hpp"

namespace xtgrad::distributed {

struct SynchronizerOptions {
  std::size_t first_bucket_bytes = std::size_t{1} << 20;  // DDP's first bucket, 1 MiB
  std::size_t bucket_bytes = std::size_t{25} << 20;       // DDP's bucket_cap_mb = 25
  bool overlap = true;  // all-reduce during the reverse pass, or after it

  SynchronizerOptions& first_bucket(std::size_t bytes) {
    first_bucket_bytes = bytes;
    return *this;
  }
  SynchronizerOptions& bucket(std::size_t bytes) {
    bucket_bytes = bytes;
    return *this;
  }
  SynchronizerOptions& with_overlap(bool on) {
    overlap = on;
    return *this;
  }
};

// Which elements of each bucket every rank receives (reduce-scatter mode).
struct ReduceScatterPlan {
  std::vector<std::vector<int>> counts;  // [bucket][rank]; sums to the bucket's gradient elements
  bool release_gradients = false;        // ZeRO stage 2
};

// What the last round did, for tests and benchmarks.
struct RoundStats {
  // Per bucket: how many nodes of the reverse walk were still to run when
  // it was handed to the communication thread, and when that thread issued
  // its MPI_Allreduce (0 when after the walk).
  std::vector<std::size_t> nodes_left_at_ready, nodes_left_at_allreduce;
  std::size_t walk_nodes = 0;  // root + 1
};

template <class T>
class GradientSynchronizer : private BackwardObserver<T> {
 public:
  // The parameters in model order (Module::named_parameters). Collective:
  // checks that every rank holds the same list (as broadcast_parameters
  // does) and starts the communication thread. std::invalid_argument for an
  // empty list, a null or repeated Parameter, or bucket limits of 0.
  GradientSynchronizer(Communicator& comm, const NamedParameterList<T>& parameters,
                       SynchronizerOptions options = {});
  GradientSynchronizer(Communicator& comm, Module<T>& module, SynchronizerOptions options = {});
  // Detaches and stops the communication thread.
  ~GradientSynchronizer() override;
  GradientSynchronizer(const GradientSynchronizer&) = delete;
  GradientSynchronizer& operator=(const GradientSynchronizer&) = delete;

  // Watch `tape`'s backward passes (Tape::add_backward_observer) until
  // detach(), the synchronizer's end or the tape's. One tape at a time.
  void attach(Tape<T>& tape);
  void detach();

  // Waits for the round of the last backward and writes the averages (see
  // above); nothing to do when no backward reached the parameters since the
  // last finish(). Rethrows the communication thread's error.
  void finish();
  bool in_flight() const { return round_active_; }

  // Switches to reduce-scatter mode (see above); local, no MPI call. Throws
  // std::logic_error while a round is in flight, std::invalid_argument for a
  // plan that does not match the buckets and ranks.
  void reduce_scatter(ReduceScatterPlan plan);
  // Reduce-scatter mode, after finish(): bucket k's sums over ranks (not yet
  // averaged) of this rank's counts[k][rank] elements, then one count per
  // member of the bucket (how many ranks produced its gradient).
  const std::vector<T>& shard(std::size_t bucket) const;
  // Rounds finished so far (finish() calls that waited for a round).
  std::uint64_t rounds() const { return rounds_; }
  Communicator& communicator() const { return comm_; }
  // The constructor's parameters, in its order.
  const std::vector<Parameter<T>*>& parameters() const { return parameters_; }

  // Bucket k's parameter indices (into the constructor's list).
  const std::vector<std::vector<std::size_t>>& buckets() const { return bucket_members_; }
  const RoundStats& last_round() const { return stats_; }
  const SynchronizerOptions& options() const { return options_; }

 private:
  struct Shared;  // what the communication thread sees
  struct Slot {   // a parameter's place in its bucket
    Parameter<T>* parameter;
    std::size_t bucket, offset, flag;  // flag: index of its count in the bucket
    std::size_t size;                  // elements
  };

  void backward_begin(const Tape<T>& tape, std::size_t root) override;
  void node_done(const Tape<T>& tape, std::size_t index) override;
  void backward_end(const Tape<T>& tape) override;
  void tape_destroyed(const Tape<T>&) override { tape_ = nullptr; }
  void make_final(std::size_t parameter);
  void hand_over(std::size_t bucket);
  // backward_begin's steps: reached_ = the nodes the root reaches; earliest_ =
  // each parameter's earliest reached reader (false when none is read); the
  // checks before a round; final_at_ = when each parameter's gradient is final.
  void mark_reached(const Tape<T>& tape, std::size_t root);
  bool find_earliest_readers(const Tape<T>& tape, std::size_t root);
  void check_round_can_start() const;
  void schedule_finals();

  Communicator& comm_;
  SynchronizerOptions options_;
  std::vector<Slot> slots_;
  std::vector<Parameter<T>*> parameters_;
  std::vector<std::size_t> bucket_elements_;  // gradient elements per bucket
  std::uint64_t rounds_ = 0;
  std::unordered_map<const Parameter<T>*, std::size_t> index_of_;
  std::vector<std::vector<std::size_t>> bucket_members_;
  std::shared_ptr<Shared> shared_;
  std::thread thread_;
  Tape<T>* tape_ = nullptr;

  // The round in flight, on the main thread.
  bool round_active_ = false;
  bool participating_ = false;         // the current backward reaches the parameters
  std::vector<std::size_t> pending_;   // per bucket: parameters not yet final
  std::vector<char> reached_;          // per node of the walk
  std::vector<std::size_t> earliest_;  // per parameter: earliest reader, or k_none
  std::vector<std::pair<std::size_t, std::size_t>> final_at_;  // (node, parameter), descending
  std::size_t cursor_ = 0;
  // A node whose backward calls MPI on the main thread (expert parallelism):
  // no hand-over until it ran; std::size_t(-1) when none.
  std::size_t hold_until_ = static_cast<std::size_t>(-1);
  RoundStats stats_;
};

extern template class GradientSynchronizer<float>;
extern template class GradientSynchronizer<double>;

}  // namespace xtgrad::distributed
