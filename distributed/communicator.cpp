#include "communicator.hpp"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <stdexcept>

namespace xtgrad::distributed {

void detail::check_mpi(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw std::runtime_error(std::string(call) + ": " + std::string(text, length));
}

namespace {
const char* level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    default:
      return "MPI_THREAD_MULTIPLE";
  }
}
}  // namespace

Communicator::Communicator() {
  init(nullptr, nullptr);
}

Communicator::Communicator(int& argc, char**& argv) {
  init(&argc, &argv);
}

void Communicator::init(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized)
    throw std::logic_error(
        "xtgrad::distributed::Communicator: MPI is initialized already; create one Communicator "
        "per process");
  detail::check_mpi(MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &thread_level_),
                    "MPI_Init_thread");
  if (thread_level_ < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    throw std::runtime_error(
        std::string("xtgrad::distributed::Communicator: the MPI library grants only ") +
        level_name(thread_level_) +
        "; the gradient synchronizer's communication thread needs MPI_THREAD_SERIALIZED or "
        "MPI_THREAD_MULTIPLE (use an MPI built with thread support, such as Debian's "
        "libopenmpi-dev)");
  }
  MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  uncaught_at_construction_ = std::uncaught_exceptions();
}

Communicator::~Communicator() {
  if (std::uncaught_exceptions() > uncaught_at_construction_)
    abort("an exception is leaving the scope of the Communicator; ending the job");
  if (steps_in_flight_ > 0)
    abort("the Communicator ends while a gradient synchronization is in flight; ending the job");
  MPI_Comm_free(&comm_);
  MPI_Finalize();
}

void Communicator::abort(const std::string& message, int code) const {
  std::cerr << "xtgrad rank " << rank_ << ": " << message << std::endl;
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; this is in case it did
}

bool Communicator::launched_by_mpirun() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (std::getenv(name) != nullptr) return true;
  return false;
}

void Communicator::barrier() const {
  detail::check_mpi(MPI_Barrier(comm_), "MPI_Barrier");
}

std::vector<std::uint64_t> Communicator::all_gather(std::uint64_t value) const {
  std::vector<std::uint64_t> out(static_cast<std::size_t>(size_));
  detail::check_mpi(MPI_Allgather(&value, 1, MPI_UINT64_T, out.data(), 1, MPI_UINT64_T, comm_),
                    "MPI_Allgather");
  return out;
}

std::string detail::broadcast_bytes(MPI_Comm comm, const std::string& value, int root,
                                    std::size_t message_bytes) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  std::uint64_t length = value.size();
  check_mpi(MPI_Bcast(&length, 1, MPI_UINT64_T, root, comm), "MPI_Bcast");
  std::string out = rank == root ? value : std::string(length, '\0');
  for (std::size_t at = 0; at < length; at += message_bytes) {
    const auto count = static_cast<int>(std::min<std::uint64_t>(message_bytes, length - at));
    check_mpi(MPI_Bcast(out.data() + at, count, MPI_CHAR, root, comm), "MPI_Bcast");
  }
  return out;
}

// Point to point rather than MPI_Gatherv: its counts and displacements are
// int, so one call cannot place more than 2 GiB on the root; here each rank's
// bytes go straight into its own string there, a message at a time.
std::vector<std::string> detail::gather_bytes(MPI_Comm comm, const std::string& value, int root,
                                              std::size_t message_bytes) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  std::uint64_t length = value.size();
  std::vector<std::uint64_t> lengths(static_cast<std::size_t>(size));
  check_mpi(MPI_Gather(&length, 1, MPI_UINT64_T, lengths.data(), 1, MPI_UINT64_T, root, comm),
            "MPI_Gather");
  const int tag = 0;
  if (rank != root) {
    for (std::size_t at = 0; at < length; at += message_bytes) {
      const auto count = static_cast<int>(std::min<std::uint64_t>(message_bytes, length - at));
      check_mpi(MPI_Send(value.data() + at, count, MPI_CHAR, root, tag, comm), "MPI_Send");
    }
    return {};
  }
  std::vector<std::string> out(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) {
    std::string& bytes = out[static_cast<std::size_t>(r)];
    if (r == root) {
      bytes = value;
      continue;
    }
    const std::uint64_t n = lengths[static_cast<std::size_t>(r)];
    bytes.resize(n);
    for (std::size_t at = 0; at < n; at += message_bytes) {
      const auto count = static_cast<int>(std::min<std::uint64_t>(message_bytes, n - at));
      check_mpi(MPI_Recv(bytes.data() + at, count, MPI_CHAR, r, tag, comm, MPI_STATUS_IGNORE),
                "MPI_Recv");
    }
  }
  return out;
}

std::string Communicator::broadcast(const std::string& value, int root) const {
  return detail::broadcast_bytes(comm_, value, root, detail::k_max_message_bytes);
}

std::vector<std::string> Communicator::gather(const std::string& value, int root) const {
  return detail::gather_bytes(comm_, value, root, detail::k_max_message_bytes);
}

double Communicator::all_reduce_sum(double value) const {
  double sum = 0.0;
  detail::check_mpi(MPI_Allreduce(&value, &sum, 1, MPI_DOUBLE, MPI_SUM, comm_), "MPI_Allreduce");
  return sum;
}

}  // namespace xtgrad::distributed
