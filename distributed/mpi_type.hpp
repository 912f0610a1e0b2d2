#pragma once
// The MPI datatype of float and double (internal to distributed/).

#include <type_traits>

#include <mpi.h>

namespace xtgrad::distributed::detail {

template <class T>
MPI_Datatype mpi_type() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  return std::is_same_v<T, float> ? MPI_FLOAT : MPI_DOUBLE;
}

}  // namespace xtgrad::distributed::detail
