#pragma once
// training::Parallel and its helpers: one training program that runs as a
// plain process or data-parallel under mpirun, with the same code.
//
//   training::Parallel parallel(argc, argv);       // the MPI job under mpirun
//   training::GradientAverager<float> gradients(parallel, model, tape);
//   ... tape.backward(loss); gradients.finish(); optimizer.step();
//   std::fprintf(parallel.out(), ...);             // rank 0 prints, the others do not
//   double loss = parallel.mean(local_loss);       // the global batch's mean
//
// Compiled with distributed/ (XTGRAD_HAVE_MPI, set by linking
// xtgrad::distributed) and started by mpirun, Parallel is the job: rank,
// size, a Communicator; GradientAverager broadcasts rank 0's parameters and
// averages the gradients during the backward pass (GradientSynchronizer);
// Shards cuts every mini-batch among the ranks (DistributedSampler).
// Otherwise, and always without MPI, Parallel is rank 0 of 1 and every call
// is a no-op, so the program is the plain single process it always was.
// The header needs no MPI: a program built without distributed/ compiles it
// as the single-process version. Every translation unit of one program must
// see the same XTGRAD_HAVE_MPI (they do when the program links the same
// libraries).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "../data/data.hpp"
#include "../engine/engine.hpp"
#include "../modules/modules.hpp"
#if XTGRAD_HAVE_MPI
#include "../distributed/distributed.hpp"
#endif

namespace xtgrad::training {

class Parallel {
 public:
  Parallel(int& argc, char**& argv) {
#if XTGRAD_HAVE_MPI
    if (xtgrad::distributed::Communicator::launched_by_mpirun())
      comm_ = std::make_unique<xtgrad::distributed::Communicator>(argc, argv);
#else
    (void)argc, (void)argv;
#endif
  }

  int rank() const {
#if XTGRAD_HAVE_MPI
    if (active()) return world().rank();
#endif
    return 0;
  }
  int size() const {
#if XTGRAD_HAVE_MPI
    if (active()) return world().size();
#endif
    return 1;
  }
  bool active() const {
#if XTGRAD_HAVE_MPI
    return comm_ != nullptr;
#else
    return false;
#endif
  }
  // Rank 0 prints, plots and writes files; the others stay quiet.
  bool quiet() const {
    return rank() != 0;
  }
  // Where a rank prints: stdout on rank 0, /dev/null on the others (opened
  // on first use; std::runtime_error when it cannot be).
  std::FILE* out() {
    if (!quiet()) return stdout;
    if (!null_) {
      null_.reset(std::fopen("/dev/null", "w"));
      if (!null_) throw std::runtime_error("cannot open /dev/null");
    }
    return null_.get();
  }

  // This rank's rows [first, first + count) of a global batch of `rows`
  // rows: rows / size() each; a batch that does not divide is refused
  // (std::invalid_argument "<what> of <rows> rows does not divide among <p>
  // processes; choose a multiple of the process count").
  std::pair<std::size_t, std::size_t> slice(std::size_t rows, const std::string& what) const {
    const auto p = static_cast<std::size_t>(size());
    if (rows % p != 0)
      throw std::invalid_argument(what + " of " + std::to_string(rows) +
                                  " rows does not divide among " + std::to_string(p) +
                                  " processes; choose a multiple of the process count");
    return {static_cast<std::size_t>(rank()) * (rows / p), rows / p};
  }

  // The mean over ranks of a per-rank value (the global mean of equal shards' means).
  double mean(double local) const {
#if XTGRAD_HAVE_MPI
    if (active()) return world().all_reduce_sum(local) / size();
#endif
    return local;
  }

  // An error on one rank ends the whole job with its message (an MPI job
  // cannot end one rank at a time); single-process, it returns and the
  // program reports as usual.
  void fail(const std::string& message) const {
#if XTGRAD_HAVE_MPI
    if (active()) world().abort(message);
#else
    (void)message;
#endif
  }

#if XTGRAD_HAVE_MPI
  xtgrad::distributed::Communicator& world() const {
    return *comm_;
  }
#endif

 private:
  struct CloseFile {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, CloseFile> null_;
#if XTGRAD_HAVE_MPI
  std::unique_ptr<xtgrad::distributed::Communicator> comm_;
#endif
};

// Averages `model`'s gradients over the job during `tape`'s backward passes;
// finish() before the optimizer's step. Rank 0's parameters are broadcast
// first. Nothing at all in a single process.
template <class T>
class GradientAverager {
 public:
  GradientAverager(Parallel& parallel, xtgrad::Module<T>& model, xtgrad::Tape<T>& tape) {
#if XTGRAD_HAVE_MPI
    if (!parallel.active()) return;
    xtgrad::distributed::broadcast_parameters(parallel.world(), model);
    sync_ = std::make_unique<xtgrad::distributed::GradientSynchronizer<T>>(parallel.world(), model);
    sync_->attach(tape);
#else
    (void)parallel, (void)model, (void)tape;
#endif
  }
  void finish() {
#if XTGRAD_HAVE_MPI
    if (sync_) sync_->finish();
#endif
  }
#if XTGRAD_HAVE_MPI
  // The job's synchronizer; null in a single process.
  xtgrad::distributed::GradientSynchronizer<T>* synchronizer() {
    return sync_.get();
  }
#endif

 private:
#if XTGRAD_HAVE_MPI
  std::unique_ptr<xtgrad::distributed::GradientSynchronizer<T>> sync_;
#endif
};

// The mini-batches of one process, cut among the ranks: under mpirun each
// rank's slice of every batch (distributed::DistributedSampler over the
// order Batcher would use), with the model's dropout row offset set to the
// slice's first row. Inactive (active() false) in a single process, where
// the program uses its Batcher directly.
struct ShardOptions {
  std::size_t batch_size = 1;
  bool shuffle = true, drop_last = false;
  std::uint64_t seed = 0;
};

class Shards {
 public:
  Shards(Parallel& parallel, std::size_t n, ShardOptions o) {
#if XTGRAD_HAVE_MPI
    if (parallel.active())
      sampler_ = std::make_unique<xtgrad::distributed::DistributedSampler>(
          n,
          xtgrad::distributed::DistributedSamplerOptions{o.batch_size, o.shuffle, o.drop_last,
                                                         o.seed},
          parallel.rank(), parallel.size());
#else
    (void)parallel, (void)n, (void)o;
#endif
  }
  bool active() const {
#if XTGRAD_HAVE_MPI
    return sampler_ != nullptr;
#else
    return false;
#endif
  }
  void start_epoch(std::uint64_t epoch) {
#if XTGRAD_HAVE_MPI
    if (sampler_) sampler_->start_epoch(epoch);
#else
    (void)epoch;
#endif
  }
  // This rank's slice of the next batch of `data` into `batch`; false at the end of the epoch.
  template <class T>
  bool next(const xtgrad::Batcher<T>& data, xtgrad::Module<T>& model, xtgrad::Batch<T>& batch) {
#if XTGRAD_HAVE_MPI
    if (!sampler_->next(shard_)) return false;
    xtgrad::distributed::gather_rows(data.inputs(), shard_.indices, batch.inputs);
    xtgrad::distributed::gather_labels(data.labels(), shard_.indices, batch.labels);
    batch.indices = shard_.indices;
    xtgrad::distributed::set_row_offset(model, shard_.row_offset);
    return true;
#else
    (void)data, (void)model, (void)batch;
    return false;
#endif
  }

 private:
#if XTGRAD_HAVE_MPI
  std::unique_ptr<xtgrad::distributed::DistributedSampler> sampler_;
  xtgrad::distributed::Shard shard_;
#endif
};

}  // namespace xtgrad::training
