#pragma once
// StateDict<T>: named arrays and named scalars, the plain data in which an
// optimizer or a learning-rate schedule reports its state (state_dict()) and
// takes it back (load_state_dict()), and in which io/ saves and loads a
// training-state directory (io/state_directory.hpp). It lives in engine/, as
// Parameter does, so that optim/ and modules/ exchange it without knowing each
// other.
//
// Each kind has its own table, so that an integer (a step count) stays an
// exact int64 and never passes through a double. Names are dotted paths
// ("state.0.exp_avg", "param_groups.1.lr"); std::map keeps them in one
// order, so equal states compare and save alike.

#include <cstdint>
#include <map>
#include <string>

#include <xtensor/xarray.hpp>

namespace xtgrad {

template <class T>
struct StateDict {
  std::map<std::string, xt::xarray<T>> arrays;
  std::map<std::string, std::int64_t> integers;
  std::map<std::string, double> reals;
  std::map<std::string, std::string> strings;

  bool empty() const {
    return arrays.empty() && integers.empty() && reals.empty() && strings.empty();
  }
};

}  // namespace xtgrad
