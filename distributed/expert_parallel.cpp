#include "expert_parallel.hpp"

#include <climits>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <unordered_set>

#include "../engine/errors.hpp"
#include "mpi_type.hpp"

namespace xtgrad::distributed {

namespace {

constexpr const char* k_shard_experts = "distributed::shard_experts";

int mpi_count(std::size_t n, const char* call) {
  if (n > static_cast<std::size_t>(INT_MAX))
    throw std::runtime_error(std::string(call) + ": " + std::to_string(n) +
                             " elements, more than one MPI call takes (2^31 - 1)");
  return static_cast<int>(n);
}

template <class T>
void all_to_all_v(const Communicator& comm, const T* send,
                  const std::vector<std::size_t>& send_counts, T* recv,
                  const std::vector<std::size_t>& recv_counts) {
  const char* call = "MPI_Alltoallv (expert rows)";
  const std::size_t p = static_cast<std::size_t>(comm.size());
  std::vector<int> sc(p), sd(p), rc(p), rd(p);
  std::size_t s_at = 0, r_at = 0;
  for (std::size_t q = 0; q < p; ++q) {
    sc[q] = mpi_count(send_counts[q], call), sd[q] = mpi_count(s_at, call);
    rc[q] = mpi_count(recv_counts[q], call), rd[q] = mpi_count(r_at, call);
    s_at += send_counts[q];
    r_at += recv_counts[q];
  }
  detail::check_mpi(MPI_Alltoallv(send, sc.data(), sd.data(), detail::mpi_type<T>(), recv,
                                  rc.data(), rd.data(), detail::mpi_type<T>(), comm.comm()),
                    call);
}

// Every SparseMoe of the model, with its name.
template <class T>
std::vector<std::pair<std::string, SparseMoe<T>*>> moe_layers(Module<T>& model) {
  std::vector<std::pair<std::string, SparseMoe<T>*>> out;
  for (auto& [name, module] : model.named_modules())
    if (auto* moe = dynamic_cast<SparseMoe<T>*>(module)) out.emplace_back(name, moe);
  return out;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

std::vector<std::uint64_t> MpiMoeExchange::all_gather(
    const std::vector<std::uint64_t>& values) const {
  const int n = mpi_count(values.size(), "MPI_Allgather (expert counts)");
  std::vector<std::uint64_t> out(values.size() * size());
  detail::check_mpi(
      MPI_Allgather(values.data(), n, MPI_UINT64_T, out.data(), n, MPI_UINT64_T, comm_.comm()),
      "MPI_Allgather (expert counts)");
  return out;
}

std::vector<std::uint64_t> MpiMoeExchange::all_to_all(const std::vector<std::uint64_t>& send,
                                                      std::size_t n) const {
  const int count = mpi_count(n, "MPI_Alltoall (expert counts)");
  std::vector<std::uint64_t> out(n * size());
  detail::check_mpi(
      MPI_Alltoall(send.data(), count, MPI_UINT64_T, out.data(), count, MPI_UINT64_T, comm_.comm()),
      "MPI_Alltoall (expert counts)");
  return out;
}

void MpiMoeExchange::all_to_all_v(const float* send, const std::vector<std::size_t>& send_counts,
                                  float* recv, const std::vector<std::size_t>& recv_counts) const {
  distributed::all_to_all_v(comm_, send, send_counts, recv, recv_counts);
}

void MpiMoeExchange::all_to_all_v(const double* send, const std::vector<std::size_t>& send_counts,
                                  double* recv, const std::vector<std::size_t>& recv_counts) const {
  distributed::all_to_all_v(comm_, send, send_counts, recv, recv_counts);
}

template <class T>
void shard_experts(const Communicator& comm, Module<T>& model, int root) {
  const auto layers = moe_layers(model);
  // Local checks first, the same on every rank of one program.
  const auto p = static_cast<std::size_t>(comm.size());
  for (const auto& [name, moe] : layers) {
    if (moe->experts_sharded())
      xtgrad::detail::fail_logic(
          k_shard_experts,
          "the experts of SparseMoe " + xtgrad::detail::quoted(name) + " are sharded already");
    if (moe->options().num_experts % p != 0)
      xtgrad::detail::fail_argument(
          k_shard_experts, "model",
          "has SparseMoe " + xtgrad::detail::quoted(name) + " with num_experts = " +
              std::to_string(moe->options().num_experts) + ", expected a multiple of the " +
              std::to_string(p) + " ranks (each holds num_experts / ranks)");
  }
  // Every rank's SparseMoe options (sizes show in the parameters below).
  std::string mine;
  for (const auto& [name, moe] : layers)
    mine += xtgrad::detail::quoted(name) + " " + moe->config().describe() + "\n";
  const std::vector<std::uint64_t> hashes = comm.all_gather(std::hash<std::string>{}(mine));
  int other = -1;
  for (int r = 0; r < comm.size() && other < 0; ++r)
    if (hashes[static_cast<std::size_t>(r)] != hashes[static_cast<std::size_t>(root)]) other = r;
  if (other >= 0) {
    const std::vector<std::string> a = split_lines(comm.broadcast(mine, root));
    const std::vector<std::string> b = split_lines(comm.broadcast(mine, other));
    std::size_t k = 0;
    while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
    const auto entry = [&](const std::vector<std::string>& lines) {
      return k < lines.size() ? lines[k] : std::string("no further SparseMoe");
    };
    throw std::invalid_argument("xtgrad::" + std::string(k_shard_experts) +
                                ": the ranks hold different models: " + entry(a) + " on rank " +
                                std::to_string(root) + " but " + entry(b) + " on rank " +
                                std::to_string(other) + "; every rank must build the same model");
  }
  // Names, shapes, then root's values of every parameter (the whole model).
  const auto named = model.named_parameters();
  broadcast_parameters<T>(comm, NamedParameterList<T>(named.begin(), named.end()), root);
  auto exchange = std::make_shared<const MpiMoeExchange>(comm);
  for (const auto& [name, moe] : layers) {
    (void)name;
    moe->shard_experts(exchange);
  }
}

template <class T>
std::function<bool(const Parameter<T>*)> is_expert_parameter(Module<T>& model) {
  auto set = std::make_shared<std::unordered_set<const Parameter<T>*>>();
  for (const auto& [name, moe] : moe_layers(model)) {
    (void)name;
    if (moe->experts_sharded())
      for (Parameter<T>* p : moe->expert_parameters()) set->insert(p);
  }
  return [set](const Parameter<T>* p) { return set->count(p) > 0; };
}

template <class T>
NamedParameterList<T> expert_parameters(Module<T>& model) {
  const auto is_expert = is_expert_parameter(model);
  NamedParameterList<T> out;
  for (const auto& named : model.named_parameters())
    if (is_expert(named.second)) out.push_back(named);
  return out;
}

template <class T>
NamedParameterList<T> replicated_parameters(Module<T>& model) {
  const auto is_expert = is_expert_parameter(model);
  NamedParameterList<T> out;
  for (const auto& named : model.named_parameters())
    if (!is_expert(named.second)) out.push_back(named);
  return out;
}

#define XTGRAD_INSTANTIATE_EXPERT_PARALLEL(T)                        \
  template void shard_experts(const Communicator&, Module<T>&, int); \
  template NamedParameterList<T> expert_parameters(Module<T>&);      \
  template NamedParameterList<T> replicated_parameters(Module<T>&);  \
  template std::function<bool(const Parameter<T>*)> is_expert_parameter(Module<T>&);
XTGRAD_INSTANTIATE_EXPERT_PARALLEL(float)
XTGRAD_INSTANTIATE_EXPERT_PARALLEL(double)
#undef XTGRAD_INSTANTIATE_EXPERT_PARALLEL

}  // namespace xtgrad::distributed
