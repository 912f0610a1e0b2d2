// doctest's main for the MPI tests: one Communicator for the job; the job
// passes when every rank passed (a failure on any rank fails it).
#define DOCTEST_CONFIG_IMPLEMENT
#include "mpi_test.hpp"

#include <exception>

namespace {
xtgrad::distributed::Communicator* g_world = nullptr;
}  // namespace

xtgrad::distributed::Communicator& xtgrad::testing::world() {
  return *g_world;
}

int main(int argc, char** argv) {
  xtgrad::distributed::Communicator comm(argc, argv);
  g_world = &comm;
  int failed = 1;
  try {
    doctest::Context context(argc, argv);
    failed = context.run() != 0 ? 1 : 0;
  } catch (const std::exception& e) {
    comm.abort(e.what());
  }
  const double failures = comm.all_reduce_sum(failed);
  return failures > 0 ? 1 : 0;
}
