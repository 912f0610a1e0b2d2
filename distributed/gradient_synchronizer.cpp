#include "gradient_synchronizer.hpp"

#include <algorithm>
#include <climits>
#include <cstring>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>

#include "../engine/errors.hpp"
#include "expert_parallel.hpp"
#include "mpi_type.hpp"

namespace xtgrad::distributed {

namespace {
constexpr const char* k_synchronizer_name = "distributed::GradientSynchronizer";
constexpr std::size_t k_none = std::numeric_limits<std::size_t>::max();
}  // namespace

// Shared by the main thread and the communication thread; everything but
// the atomic is guarded by `mutex`, and a bucket's buffer belongs to the
// thread from hand_over until `done` passes it.
template <class T>
struct GradientSynchronizer<T>::Shared {
  MPI_Comm comm = MPI_COMM_NULL;  // this synchronizer's own duplicate
  std::vector<std::vector<T>> buffers;
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<char> ready;  // per bucket: handed over in this round
  std::size_t next = 0;     // the bucket the thread reduces next
  bool active = false;      // a round is in flight
  bool stop = false;
  bool in_mpi = false;
  std::exception_ptr error;
  std::atomic<std::size_t> nodes_left{0};  // written by node_done, read by the thread
  std::vector<std::size_t> left_at_allreduce;
  // Reduce-scatter mode (set between rounds): per bucket, the gradient
  // elements, every rank's count, and this rank's sums plus the counts.
  bool scatter = false, release = false;
  std::vector<std::size_t> elements;
  std::vector<std::vector<int>> counts;
  std::vector<std::vector<T>> shards;
};

namespace {

// The communication thread: in bucket order, one blocking in-place
// all-reduce per bucket once it is handed over.
template <class T, class Shared>
void communicate(std::shared_ptr<Shared> s) {
  std::unique_lock<std::mutex> lock(s->mutex);
  for (;;) {
    s->cv.wait(lock, [&] {
      return s->stop || (s->active && s->next < s->ready.size() && s->ready[s->next]);
    });
    if (s->stop) return;
    const std::size_t k = s->next;
    s->in_mpi = true;
    lock.unlock();
    s->left_at_allreduce[k] = s->nodes_left.load(std::memory_order_relaxed);
    std::vector<T>& buffer = s->buffers[k];
    int code = MPI_SUCCESS;
    const char* call = "MPI_Allreduce (gradient bucket)";
    if (!s->scatter) {
      code = MPI_Allreduce(MPI_IN_PLACE, buffer.data(), static_cast<int>(buffer.size()),
                           detail::mpi_type<T>(), MPI_SUM, s->comm);
    } else {
      // This rank's part of the gradients, then every rank the counts.
      std::vector<T>& shard = s->shards[k];
      const std::size_t n = s->elements[k], own = shard.size() - (buffer.size() - n);
      call = "MPI_Reduce_scatter (gradient bucket)";
      code = MPI_Reduce_scatter(buffer.data(), shard.data(), s->counts[k].data(),
                                detail::mpi_type<T>(), MPI_SUM, s->comm);
      if (code == MPI_SUCCESS) {
        call = "MPI_Allreduce (gradient counts)";
        code = MPI_Allreduce(MPI_IN_PLACE, buffer.data() + n, static_cast<int>(buffer.size() - n),
                             detail::mpi_type<T>(), MPI_SUM, s->comm);
        std::copy(buffer.begin() + static_cast<std::ptrdiff_t>(n), buffer.end(),
                  shard.begin() + static_cast<std::ptrdiff_t>(own));
        if (s->release) std::vector<T>().swap(buffer);  // back in make_final next round
      }
    }
    lock.lock();
    s->in_mpi = false;
    if (code != MPI_SUCCESS) {
      try {
        detail::check_mpi(code, call);
      } catch (...) {
        s->error = std::current_exception();
      }
      s->next = s->ready.size();  // no further call: the job cannot continue
    } else {
      ++s->next;
    }
    s->cv.notify_all();
  }
}

}  // namespace

template <class T>
GradientSynchronizer<T>::GradientSynchronizer(Communicator& comm, Module<T>& module,
                                              SynchronizerOptions options)
    : GradientSynchronizer(comm, replicated_parameters(module), options) {}

template <class T>
GradientSynchronizer<T>::GradientSynchronizer(Communicator& comm,
                                              const NamedParameterList<T>& parameters,
                                              SynchronizerOptions options)
    : comm_(comm), options_(options), shared_(std::make_shared<Shared>()) {
  if (parameters.empty())
    xtgrad::detail::fail_argument(k_synchronizer_name, "parameters",
                                  "is empty, expected a model's parameters");
  if (options.first_bucket_bytes == 0 || options.bucket_bytes == 0)
    xtgrad::detail::fail_argument(k_synchronizer_name, "options", "has a bucket limit of 0 bytes");
  for (std::size_t j = 0; j < parameters.size(); ++j) {
    const Parameter<T>* p = parameters[j].second;
    if (p == nullptr)
      xtgrad::detail::fail_argument(k_synchronizer_name, "parameters",
                                    "holds a null Parameter at position " + std::to_string(j));
    if (!index_of_.emplace(p, j).second)
      xtgrad::detail::fail_argument(
          k_synchronizer_name, "parameters",
          "holds Parameter " + xtgrad::detail::quoted(parameters[j].first) + " twice");
  }
  detail::check_same_parameters(comm, parameters, 0, k_synchronizer_name);

  // Reverse order, closing a bucket once it reaches its limit
  // (compute_bucket_assignment_by_size).
  slots_.resize(parameters.size());
  std::vector<std::size_t> elements;
  std::size_t limit = options.first_bucket_bytes, bytes = 0;
  for (std::size_t j = parameters.size(); j-- > 0;) {
    if (bucket_members_.empty() || bytes >= limit) {
      if (!bucket_members_.empty()) limit = options.bucket_bytes;
      bucket_members_.emplace_back();
      elements.push_back(0);
      bytes = 0;
    }
    const std::size_t n = parameters[j].second->value.size();
    slots_[j] = {parameters[j].second, bucket_members_.size() - 1, elements.back(), 0, n};
    bucket_members_.back().push_back(j);
    elements.back() += n;
    bytes += n * sizeof(T);
  }
  for (const auto& named : parameters) parameters_.push_back(named.second);
  bucket_elements_ = elements;
  shared_->elements = elements;
  shared_->buffers.resize(bucket_members_.size());
  for (std::size_t b = 0; b < bucket_members_.size(); ++b) {
    for (std::size_t k = 0; k < bucket_members_[b].size(); ++k)
      slots_[bucket_members_[b][k]].flag = elements[b] + k;
    const std::size_t total = elements[b] + bucket_members_[b].size();
    if (total > static_cast<std::size_t>(INT_MAX))
      xtgrad::detail::fail_argument(k_synchronizer_name, "parameters",
                                    "make a bucket of " + std::to_string(total) +
                                        " elements, more than one MPI call takes (2^31 - 1)");
    shared_->buffers[b].assign(total, T(0));
  }
  shared_->ready.assign(bucket_members_.size(), 0);
  shared_->left_at_allreduce.assign(bucket_members_.size(), 0);
  pending_.resize(bucket_members_.size());
  earliest_.resize(parameters.size());
  detail::check_mpi(MPI_Comm_dup(comm.comm(), &shared_->comm), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(shared_->comm, MPI_ERRORS_RETURN);
  thread_ = std::thread(communicate<T, Shared>, shared_);
}

template <class T>
GradientSynchronizer<T>::~GradientSynchronizer() {
  detach();
  bool busy = false;
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->stop = true;
    busy = shared_->in_mpi;
  }
  shared_->cv.notify_all();
  // A thread blocked in an all-reduce that other ranks will never join
  // (an exception ended this rank's step) cannot be joined: it keeps the
  // shared state alive, and the Communicator aborts the job (a round is in
  // flight).
  if (busy) {
    thread_.detach();
    return;
  }
  thread_.join();
  MPI_Comm_free(&shared_->comm);
}

template <class T>
void GradientSynchronizer<T>::attach(Tape<T>& tape) {
  if (tape_ != nullptr)
    xtgrad::detail::fail_logic(k_synchronizer_name + std::string("::attach"),
                               "a tape is attached already; detach() it first");
  tape.add_backward_observer(this);
  tape_ = &tape;
}

template <class T>
void GradientSynchronizer<T>::detach() {
  if (tape_ == nullptr) return;
  tape_->remove_backward_observer(this);
  tape_ = nullptr;
}

namespace {

// The reached node of lowest index whose op is `op`; k_none when there is none.
template <class T>
std::size_t first_reached(const Tape<T>& tape, const std::vector<char>& reached, std::size_t root,
                          const char* op) {
  for (std::size_t i = 0; i <= root; ++i)
    if (reached[i] && std::strcmp(tape.node_op(i), op) == 0) return i;
  return k_none;
}

}  // namespace

template <class T>
void GradientSynchronizer<T>::mark_reached(const Tape<T>& tape, std::size_t root) {
  // One reverse sweep over the parents lists.
  reached_.assign(root + 1, 0);
  reached_[root] = 1;
  for (std::size_t i = root + 1; i-- > 0;)
    if (reached_[i])
      for (std::size_t k = 0; k < tape.node_parent_count(i); ++k)
        reached_[tape.node_parent(i, k)] = 1;
}

template <class T>
bool GradientSynchronizer<T>::find_earliest_readers(const Tape<T>& tape, std::size_t root) {
  // A Parameter may be recorded several times; the root itself counts when it is one.
  std::fill(earliest_.begin(), earliest_.end(), k_none);
  bool any = false;
  const auto ours = [this](const Parameter<T>* p) {
    const auto it = p ? index_of_.find(p) : index_of_.end();
    return it == index_of_.end() ? k_none : it->second;
  };
  if (const std::size_t j = ours(tape.node_param(root)); j != k_none)
    earliest_[j] = root, any = true;
  for (std::size_t i = 0; i <= root; ++i) {
    if (!reached_[i]) continue;
    for (std::size_t k = 0; k < tape.node_parent_count(i); ++k) {
      const std::size_t j = ours(tape.node_param(tape.node_parent(i, k)));
      if (j == k_none) continue;
      any = true;
      earliest_[j] = std::min(earliest_[j], i);
    }
  }
  return any;
}

template <class T>
void GradientSynchronizer<T>::check_round_can_start() const {
  if (round_active_)
    xtgrad::detail::fail_logic(k_synchronizer_name,
                               "a backward reached the parameters again before finish() "
                               "of the previous one; call finish() after every backward");
  for (const Slot& s : slots_)
    if (s.parameter->value.size() != s.size)
      xtgrad::detail::fail_logic(
          k_synchronizer_name, "Parameter " + xtgrad::detail::quoted(s.parameter->name) + " has " +
                                   std::to_string(s.parameter->value.size()) +
                                   " elements but had " + std::to_string(s.size) +
                                   " when the synchronizer was built");
}

template <class T>
void GradientSynchronizer<T>::schedule_finals() {
  // A parameter's gradient is final once its earliest reader ran; one never read, at once.
  final_at_.clear();
  cursor_ = 0;
  for (std::size_t j = 0; j < earliest_.size(); ++j)
    if (earliest_[j] != k_none) final_at_.emplace_back(earliest_[j], j);
  std::sort(final_at_.begin(), final_at_.end(), std::greater<>());
  for (std::size_t j = 0; j < earliest_.size(); ++j)
    if (earliest_[j] == k_none) make_final(j);  // unused: final at once
}

template <class T>
void GradientSynchronizer<T>::backward_begin(const Tape<T>& tape, std::size_t root) {
  mark_reached(tape, root);
  if (!find_earliest_readers(tape, root)) return;  // another model's backward
  // The reached node of lowest index whose backward makes collective calls
  // on the main thread (an expert-parallel all-to-all): hand-overs wait
  // until it ran, so that only one thread is in MPI at a time.
  hold_until_ = first_reached(tape, reached_, root, k_moe_experts_all_to_all);
  check_round_can_start();
  round_active_ = true;
  participating_ = true;
  comm_.begin_step_in_flight();
  for (std::size_t b = 0; b < bucket_members_.size(); ++b) pending_[b] = bucket_members_[b].size();
  stats_ = {};
  stats_.walk_nodes = root + 1;
  stats_.nodes_left_at_ready.assign(bucket_members_.size(), 0);
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    std::fill(shared_->ready.begin(), shared_->ready.end(), 0);
    shared_->next = 0;
    shared_->active = true;
    shared_->error = nullptr;
  }
  shared_->nodes_left.store(root + 1, std::memory_order_relaxed);
  schedule_finals();
}

template <class T>
void GradientSynchronizer<T>::node_done(const Tape<T>&, std::size_t index) {
  if (!participating_) return;
  shared_->nodes_left.store(index, std::memory_order_relaxed);
  while (cursor_ < final_at_.size() && final_at_[cursor_].first >= index)
    make_final(final_at_[cursor_++].second);
  if (hold_until_ != k_none && index <= hold_until_) {
    hold_until_ = k_none;
    if (options_.overlap)
      for (std::size_t b = 0; b < bucket_members_.size(); ++b)
        if (pending_[b] == 0) hand_over(b);
  }
}

template <class T>
void GradientSynchronizer<T>::backward_end(const Tape<T>&) {
  if (!participating_) return;
  while (cursor_ < final_at_.size()) make_final(final_at_[cursor_++].second);
  participating_ = false;
  if (!options_.overlap || hold_until_ != k_none)
    for (std::size_t b = 0; b < bucket_members_.size(); ++b) hand_over(b);
  hold_until_ = k_none;
}

template <class T>
void GradientSynchronizer<T>::make_final(std::size_t j) {
  const Slot& s = slots_[j];
  Parameter<T>& p = *s.parameter;
  std::vector<T>& buffer = shared_->buffers[s.bucket];
  const std::size_t total = bucket_elements_[s.bucket] + bucket_members_[s.bucket].size();
  if (buffer.size() != total) buffer.resize(total);  // released after the last round
  T* out = buffer.data();
  const std::size_t n = s.size;
  if (p.has_grad && p.grad.size() == n)
    std::copy(p.grad.data(), p.grad.data() + n, out + s.offset);
  else
    std::fill(out + s.offset, out + s.offset + n, T(0));
  out[s.flag] = p.has_grad ? T(1) : T(0);
  if (shared_->release) {  // ZeRO stage 2: the bucket holds it now
    p.grad = xt::xarray<T>::from_shape({0});
    p.has_grad = false;
  }
  if (--pending_[s.bucket] == 0 && options_.overlap && hold_until_ == k_none) hand_over(s.bucket);
}

template <class T>
void GradientSynchronizer<T>::hand_over(std::size_t bucket) {
  stats_.nodes_left_at_ready[bucket] = shared_->nodes_left.load(std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->ready[bucket] = 1;
  }
  shared_->cv.notify_all();
}

template <class T>
void GradientSynchronizer<T>::finish() {
  if (!round_active_) return;
  if (participating_)
    xtgrad::detail::fail_logic(k_synchronizer_name + std::string("::finish"),
                               "the backward of this round did not complete (a backward rule "
                               "threw), so the ranks cannot agree on the gradients; end the job "
                               "with Communicator::abort");
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(shared_->mutex);
    shared_->cv.wait(lock, [&] { return shared_->next == shared_->ready.size(); });
    shared_->active = false;
    error = shared_->error;
    stats_.nodes_left_at_allreduce = shared_->left_at_allreduce;
  }
  if (error) std::rethrow_exception(error);  // the round stays in flight: the job must end
  round_active_ = false;
  comm_.end_step_in_flight();
  ++rounds_;
  if (shared_->scatter) return;  // the sums stay in shard(bucket)
  const T ranks = static_cast<T>(comm_.size());
  for (Slot& s : slots_) {
    Parameter<T>& p = *s.parameter;
    const T* in = shared_->buffers[s.bucket].data();
    if (p.grad.shape() != p.value.shape()) p.grad.resize(p.value.shape());
    T* g = p.grad.data();
    for (std::size_t i = 0; i < s.size; ++i)
      g[i] = in[s.offset + i] / ranks;  // the mean over ranks
    p.has_grad = in[s.flag] > T(0);
  }
}

template <class T>
void GradientSynchronizer<T>::reduce_scatter(ReduceScatterPlan plan) {
  const std::string function = k_synchronizer_name + std::string("::reduce_scatter");
  if (round_active_)
    xtgrad::detail::fail_logic(function, "a round is in flight; finish() it first");
  const auto ranks = static_cast<std::size_t>(comm_.size());
  if (plan.counts.size() != bucket_members_.size())
    xtgrad::detail::fail_argument(function, "plan",
                                  "has counts for " + std::to_string(plan.counts.size()) +
                                      " buckets, expected " +
                                      std::to_string(bucket_members_.size()));
  for (std::size_t b = 0; b < plan.counts.size(); ++b) {
    std::size_t sum = 0;
    for (const int c : plan.counts[b]) sum += c < 0 ? bucket_elements_[b] + 1 : std::size_t(c);
    if (plan.counts[b].size() != ranks || sum != bucket_elements_[b])
      xtgrad::detail::fail_argument(function, "plan",
                                    "bucket " + std::to_string(b) + " needs " +
                                        std::to_string(ranks) + " counts >= 0 summing to its " +
                                        std::to_string(bucket_elements_[b]) + " elements");
  }
  shared_->shards.resize(bucket_members_.size());
  for (std::size_t b = 0; b < plan.counts.size(); ++b)
    shared_->shards[b].assign(
        static_cast<std::size_t>(plan.counts[b][static_cast<std::size_t>(comm_.rank())]) +
            bucket_members_[b].size(),
        T(0));
  shared_->counts = std::move(plan.counts);
  shared_->release = plan.release_gradients;
  shared_->scatter = true;
}

template <class T>
const std::vector<T>& GradientSynchronizer<T>::shard(std::size_t bucket) const {
  if (!shared_->scatter || bucket >= shared_->shards.size())
    throw std::out_of_range(std::string("xtgrad::") + k_synchronizer_name +
                            "::shard: not in reduce-scatter mode, or no bucket " +
                            std::to_string(bucket));
  return shared_->shards[bucket];
}

template class GradientSynchronizer<float>;
template class GradientSynchronizer<double>;

}  // namespace xtgrad::distributed
