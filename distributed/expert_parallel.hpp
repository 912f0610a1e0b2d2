#pragma once
// Expert parallelism over MPI: the routed experts of every SparseMoe
// (modules/moe.hpp) sharded over the ranks of a Communicator, everything
// else data-parallel as before (DeepSpeed-MoE with the expert-parallel
// group the whole job; GShard).
//
//   Communicator comm(argc, argv);
//   Model model(..., generator);                  // the same model on every rank
//   distributed::shard_experts(comm, model);      // rank r keeps experts [r E/P, (r+1) E/P)
//   distributed::GradientSynchronizer<float> sync(comm, model);   // replicated parameters only
//   sync.attach(tape);
//   optim::AdamW<float> experts_opt(distributed::expert_parameters(model), options);
//   ... forward on this rank's slice of the global batch (collective),
//   tape.backward(loss) (collective), sync.finish(), optimizer.step(), experts_opt.step()
//
// shard_experts (collective) checks that the ranks hold the same model
// (every parameter's name and shape, as broadcast_parameters does, and every
// SparseMoe's options: std::invalid_argument on every rank naming the first
// difference), broadcasts root's values of every parameter (so that each
// rank's shard is a slice of one model), then shards every SparseMoe of the
// model over an MpiMoeExchange (std::invalid_argument on every rank when a
// num_experts is not a multiple of the ranks, before anything changes).
//
// Which parameters are sharded: expert_parameters(model) lists the routed
// experts' parameters of every sharded SparseMoe (each rank its own, under
// the global names), replicated_parameters(model) the others, in
// named_parameters order; is_expert_parameter(model) is the predicate. The
// Module forms of broadcast_parameters and GradientSynchronizer take the
// replicated ones only, so data-parallel and ZeRO training (a
// ShardedOptimizer over that synchronizer) compose unchanged; the experts
// are stepped by an optimizer of each rank's own (their gradients are the
// mean over ranks already, see moe_experts in ops/moe.hpp).
//
// Overlap: the all-to-alls of a backward run on the main thread, so a
// GradientSynchronizer hands its buckets to its communication thread only
// once the reverse pass is past the last such node (MPI_THREAD_SERIALIZED:
// one thread in MPI at a time); buckets of the layers after the last MoE
// layer still overlap with the rest of the reverse pass.
//
// Checkpoints: per rank. Each rank's state_dict() (Module::save) holds the
// replicated parameters and its own experts under their global names, and
// the optimizer of its experts saves per rank too (a ShardedOptimizer of the
// replicated ones as documented there). Resume with the same number of
// ranks: build and shard the model as before, then each rank loads its own
// files. Since the names are global, the union of the ranks' expert entries
// with rank 0's replicated ones is the one-process state dict.
//
// The exchange refers to the Communicator: it must outlive every forward
// and backward of the sharded layers.
//
// Failure: as data-parallel training, an exception on one rank must end the
// job (Communicator::abort): the other ranks wait in an all-to-all.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "../engine/ops/moe.hpp"
#include "../modules/module.hpp"
#include "../modules/moe.hpp"
#include "broadcast.hpp"
#include "communicator.hpp"

namespace xtgrad::distributed {

// MoeExchange over a Communicator's ranks (MPI_Allgather, MPI_Alltoall,
// MPI_Alltoallv on its communicator, from the calling thread). Refuses
// (std::runtime_error) a message of 2^31 elements or more.
class MpiMoeExchange final : public MoeExchange {
 public:
  explicit MpiMoeExchange(const Communicator& comm) : comm_(comm) {}
  std::size_t rank() const override { return static_cast<std::size_t>(comm_.rank()); }
  std::size_t size() const override { return static_cast<std::size_t>(comm_.size()); }
  std::vector<std::uint64_t> all_gather(const std::vector<std::uint64_t>& values) const override;
  std::vector<std::uint64_t> all_to_all(const std::vector<std::uint64_t>& send,
                                        std::size_t n) const override;
  void all_to_all_v(const float* send, const std::vector<std::size_t>& send_counts, float* recv,
                    const std::vector<std::size_t>& recv_counts) const override;
  void all_to_all_v(const double* send, const std::vector<std::size_t>& send_counts, double* recv,
                    const std::vector<std::size_t>& recv_counts) const override;

 private:
  const Communicator& comm_;
};

// Collective; see above.
template <class T>
void shard_experts(const Communicator& comm, Module<T>& model, int root = 0);

// The sharded routed experts' parameters of `model`, and the others.
template <class T>
NamedParameterList<T> expert_parameters(Module<T>& model);
template <class T>
NamedParameterList<T> replicated_parameters(Module<T>& model);
// True for the parameters expert_parameters(model) lists.
template <class T>
std::function<bool(const Parameter<T>*)> is_expert_parameter(Module<T>& model);

// The Parameters of a NamedParameterList (for an optimizer).
template <class T>
std::vector<Parameter<T>*> parameters_of(const NamedParameterList<T>& list) {
  std::vector<Parameter<T>*> out;
  for (const auto& named : list) out.push_back(named.second);
  return out;
}

#define XTGRAD_EXTERN_EXPERT_PARALLEL(T)                                    \
  extern template void shard_experts(const Communicator&, Module<T>&, int); \
  extern template NamedParameterList<T> expert_parameters(Module<T>&);      \
  extern template NamedParameterList<T> replicated_parameters(Module<T>&);  \
  extern template std::function<bool(const Parameter<T>*)> is_expert_parameter(Module<T>&);
XTGRAD_EXTERN_EXPERT_PARALLEL(float)
XTGRAD_EXTERN_EXPERT_PARALLEL(double)
#undef XTGRAD_EXTERN_EXPERT_PARALLEL

}  // namespace xtgrad::distributed
