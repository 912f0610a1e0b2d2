#include "communicator.hpp"

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

std::string Communicator::broadcast(const std::string& value, int root) const {
  std::uint64_t length = value.size();
  detail::check_mpi(MPI_Bcast(&length, 1, MPI_UINT64_T, root, comm_), "MPI_Bcast");
  std::string out = rank_ == root ? value : std::string(length, '\0');
  detail::check_mpi(MPI_Bcast(out.data(), static_cast<int>(length), MPI_CHAR, root, comm_),
                    "MPI_Bcast");
  return out;
}

double Communicator::all_reduce_sum(double value) const {
  double sum = 0.0;
  detail::check_mpi(MPI_Allreduce(&value, &sum, 1, MPI_DOUBLE, MPI_SUM, comm_), "MPI_Allreduce");
  return sum;
}

}  // namespace xtgrad::distributed
