#pragma once
// Communicator: the MPI job this process belongs to (MPI_COMM_WORLD), with
// MPI's lifetime tied to the object (RAII): the constructor initializes MPI,
// the destructor finalizes it. One per process.
//
// Thread level: the gradient synchronizer all-reduces from a communication
// thread of its own while the main thread runs the reverse pass, so MPI must
// allow calls from more than one thread, one at a time:
// MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE. The constructor asks for
// MPI_THREAD_SERIALIZED and refuses (std::runtime_error) a library that
// grants less. Serialized means: while a synchronizer's step is in flight
// (from the backward that starts it to its finish()), the main thread makes
// no MPI call.
//
// Failure: an MPI job cannot end one rank at a time, since the others would
// wait forever in their next collective. abort(message) prints
// "xtgrad rank R: message" on stderr and ends the whole job (MPI_Abort).
// The destructor does that too when it runs while an exception unwinds the
// stack, or while a synchronizer's step is still in flight, instead of
// finalizing (which would wait for the other ranks). The usual main:
//
//   Communicator comm(argc, argv);
//   try { train(comm); } catch (const std::exception& e) { comm.abort(e.what()); }
//
// Errors of MPI calls made through this library are std::runtime_error with
// MPI's message (MPI_ERRORS_RETURN is set on the communicators it uses).

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <mpi.h>

namespace xtgrad::distributed {

class Communicator {
 public:
  // MPI_Init_thread(MPI_THREAD_SERIALIZED). argc/argv may be null. Throws
  // std::logic_error when MPI was initialized already (a second
  // Communicator), std::runtime_error when MPI grants less than
  // MPI_THREAD_SERIALIZED.
  Communicator();
  Communicator(int& argc, char**& argv);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // The thread level MPI granted (MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE).
  int thread_level() const { return thread_level_; }
  MPI_Comm comm() const { return comm_; }

  // Prints "xtgrad rank R: message" to stderr and ends every rank of the job
  // with exit code `code` (MPI_Abort). Never returns.
  [[noreturn]] void abort(const std::string& message, int code = 1) const;

  // True when this process was started by mpirun/mpiexec (Open MPI, MPICH or
  // a PMI launcher set their environment variables), so that a program can
  // stay a plain single process otherwise.
  static bool launched_by_mpirun();

  // Collectives on every rank (each rank must call them in the same order).
  void barrier() const;
  // Each rank's value, in rank order.
  std::vector<std::uint64_t> all_gather(std::uint64_t value) const;
  // root's string on every rank. Any length: MPI counts are int, so bytes
  // move in messages of at most detail::k_max_message_bytes.
  std::string broadcast(const std::string& value, int root) const;
  // Each rank's bytes on root, in rank order (empty elsewhere). Any length,
  // as broadcast.
  std::vector<std::string> gather(const std::string& value, int root) const;
  // The sum over ranks.
  double all_reduce_sum(double value) const;

  // Steps in flight (GradientSynchronizer): while nonzero the destructor
  // aborts instead of finalizing.
  void begin_step_in_flight() { ++steps_in_flight_; }
  void end_step_in_flight() { --steps_in_flight_; }

 private:
  void init(int* argc, char*** argv);
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  int thread_level_ = MPI_THREAD_SINGLE;
  int uncaught_at_construction_ = 0;
  int steps_in_flight_ = 0;
};

namespace detail {
// std::runtime_error "call: <MPI's message>" unless code == MPI_SUCCESS.
void check_mpi(int code, const char* call);

// The largest message the byte collectives send at once: 1 GiB, well inside
// the int counts of MPI-3 (2^31 - 1).
inline constexpr std::size_t k_max_message_bytes = std::size_t(1) << 30;

// Communicator::broadcast and ::gather with the message size as an argument
// (1 to k_max_message_bytes), so that tests can cross message boundaries with
// small data.
std::string broadcast_bytes(MPI_Comm comm, const std::string& value, int root,
                            std::size_t message_bytes);
std::vector<std::string> gather_bytes(MPI_Comm comm, const std::string& value, int root,
                                      std::size_t message_bytes);
}  // namespace detail

}  // namespace xtgrad::distributed
