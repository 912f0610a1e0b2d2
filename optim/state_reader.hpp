#pragma once
// Internal to optim/: reading a StateDict for load_state_dict. Every accessor
// checks that the entry exists with the right kind (and, for arrays, shape)
// and throws std::invalid_argument
//   "xtgrad::<function>: state dict entry '<name>' ..."
// otherwise; finish() refuses every entry no accessor asked for, so that a
// state dict of another optimizer or with more parameters cannot load
// half-way. Nothing here changes the optimizer: load_state_dict reads
// everything into new values first and assigns them only at the end.

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "../engine/state_dict.hpp"

namespace xtgrad::optim::detail {

template <class T>
class StateReader {
 public:
  StateReader(std::string function, const StateDict<T>& state)
      : function_(std::move(function)), state_(state) {}

  const std::string& function() const { return function_; }

  // The string entry `name`, which must equal `expected` (a type name).
  void expect_string(const std::string& name, const std::string& expected);
  std::int64_t integer(const std::string& name);
  // integer(name), which must lie in [minimum, maximum].
  std::int64_t integer_in(const std::string& name, std::int64_t minimum, std::int64_t maximum);
  double real(const std::string& name);
  bool has_array(const std::string& name) const { return state_.arrays.count(name) != 0; }
  bool has_integer(const std::string& name) const { return state_.integers.count(name) != 0; }
  // The array entry `name`, which must have `shape` (that of `what`, e.g.
  // "parameter 2 ('w1.weight')").
  template <class S>
  const xt::xarray<T>& array(const std::string& name, const S& shape, const std::string& what);

  // Throws for the first entry (in name order) that no accessor asked for.
  void finish() const;
  [[noreturn]] void fail(const std::string& what) const;

 private:
  std::string function_;
  const StateDict<T>& state_;
  std::set<std::string> used_;
};

extern template class StateReader<float>;
extern template class StateReader<double>;

}  // namespace xtgrad::optim::detail

#include <algorithm>

#include "../engine/errors.hpp"

namespace xtgrad::optim::detail {

template <class T>
template <class S>
const xt::xarray<T>& StateReader<T>::array(const std::string& name, const S& shape,
                                           const std::string& what) {
  const auto it = state_.arrays.find(name);
  if (it == state_.arrays.end())
    fail("has no array " + xtgrad::detail::quoted(name) + " (expected one shaped as " + what +
         ", " + xtgrad::detail::shape_str(shape) + ")");
  const auto& got = it->second.shape();
  if (got.size() != shape.size() || !std::equal(got.begin(), got.end(), shape.begin()))
    fail("array " + xtgrad::detail::quoted(name) + " has shape " + xtgrad::detail::shape_str(got) +
         ", expected " + xtgrad::detail::shape_str(shape) + ", the shape of " + what);
  used_.insert("a" + name);
  return it->second;
}

}  // namespace xtgrad::optim::detail
