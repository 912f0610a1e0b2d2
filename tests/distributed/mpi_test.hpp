#pragma once
// The MPI tests (label mpi) run every TEST_CASE on every rank of one
// mpirun job: each case is collective, so all ranks run the cases in the
// same order (mpi_main.cpp). world() is the job's Communicator.
#include <doctest/doctest.h>

#include <xtgrad/distributed/communicator.hpp>

namespace xtgrad::testing {
distributed::Communicator& world();
}  // namespace xtgrad::testing
