#include "broadcast.hpp"

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include "../engine/errors.hpp"
#include "mpi_type.hpp"

namespace xtgrad::distributed {

namespace {

// One line per parameter: "'w1.weight' [16, 2] float".
template <class T>
std::vector<std::string> describe(const NamedParameterList<T>& parameters) {
  std::vector<std::string> lines;
  for (const auto& [name, p] : parameters)
    lines.push_back(xtgrad::detail::quoted(name) + " " +
                    xtgrad::detail::shape_str(p->value.shape()) + " " +
                    (std::is_same_v<T, float> ? "float" : "double"));
  return lines;
}

std::string join(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& line : lines) out += line + "\n";
  return out;
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// FNV-1a, 64 bits (Fowler, Noll, Vo).
std::uint64_t fnv1a(const std::string& text) {
  std::uint64_t h = 14695981039346656037ull;
  for (const unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

void check_root(const Communicator& comm, int root, const char* who) {
  if (root < 0 || root >= comm.size())
    xtgrad::detail::fail_argument(who, "root",
                                  "is " + std::to_string(root) + ", expected a rank in [0, " +
                                      std::to_string(comm.size()) + ")");
}

}  // namespace

template <class T>
void detail::check_same_parameters(const Communicator& comm,
                                   const NamedParameterList<T>& parameters, int root,
                                   const char* who) {
  check_root(comm, root, who);
  const std::string mine = join(describe(parameters));
  const std::vector<std::uint64_t> hashes = comm.all_gather(fnv1a(mine));
  int other = -1;
  for (int r = 0; r < comm.size() && other < 0; ++r)
    if (hashes[static_cast<std::size_t>(r)] != hashes[static_cast<std::size_t>(root)]) other = r;
  if (other < 0) return;
  const std::vector<std::string> a = split(comm.broadcast(mine, root));
  const std::vector<std::string> b = split(comm.broadcast(mine, other));
  std::size_t k = 0;
  while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
  const auto entry = [&](const std::vector<std::string>& lines) {
    return k < lines.size()
               ? lines[k]
               : std::string("no parameter (it has ") + std::to_string(lines.size()) + ")";
  };
  throw std::invalid_argument(
      "xtgrad::" + std::string(who) + ": the ranks hold different models: parameter " +
      std::to_string(k) + " is " + entry(a) + " on rank " + std::to_string(root) + " but " +
      entry(b) + " on rank " + std::to_string(other) + "; every rank must build the same model");
}

template <class T>
void broadcast_parameters(const Communicator& comm, const NamedParameterList<T>& parameters,
                          int root) {
  detail::check_same_parameters(comm, parameters, root, "distributed::broadcast_parameters");
  for (const auto& [name, p] : parameters) {
    (void)name;
    // In messages of int counts, whatever the parameter's size.
    const std::size_t per_message = detail::k_max_message_bytes / sizeof(T);
    for (std::size_t at = 0; at < p->value.size(); at += per_message) {
      const auto count = static_cast<int>(std::min(per_message, p->value.size() - at));
      ::xtgrad::distributed::detail::check_mpi(
          MPI_Bcast(p->value.data() + at, count, detail::mpi_type<T>(), root, comm.comm()),
          "MPI_Bcast");
    }
    p->mark_changed();
  }
}

template void broadcast_parameters(const Communicator&, const NamedParameterList<float>&, int);
template void broadcast_parameters(const Communicator&, const NamedParameterList<double>&, int);
template void detail::check_same_parameters(const Communicator&, const NamedParameterList<float>&,
                                            int, const char*);
template void detail::check_same_parameters(const Communicator&, const NamedParameterList<double>&,
                                            int, const char*);

}  // namespace xtgrad::distributed
