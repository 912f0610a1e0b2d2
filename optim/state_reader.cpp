#include "state_reader.hpp"

#include "../engine/errors.hpp"

namespace xtgrad::optim::detail {

namespace {

constexpr std::size_t k_max_quoted = 200;

std::string name_str(const std::string& name) {
  return xtgrad::detail::quoted(xtgrad::detail::escaped(name, k_max_quoted));
}

}  // namespace

template <class T>
void StateReader<T>::fail(const std::string& what) const {
  xtgrad::detail::fail_value(function_, "the state dict " + what);
}

template <class T>
void StateReader<T>::expect_string(const std::string& name, const std::string& expected) {
  const auto it = state_.strings.find(name);
  if (it == state_.strings.end())
    fail("has no string " + name_str(name) + " (expected " + name_str(expected) + ")");
  if (it->second != expected)
    fail("has string " + name_str(name) + " = " + name_str(it->second) + ", expected " +
         name_str(expected));
  used_.insert("s" + name);
}

template <class T>
std::int64_t StateReader<T>::integer(const std::string& name) {
  const auto it = state_.integers.find(name);
  if (it == state_.integers.end()) fail("has no integer " + name_str(name));
  used_.insert("i" + name);
  return it->second;
}

template <class T>
std::int64_t StateReader<T>::integer_in(const std::string& name, std::int64_t minimum,
                                        std::int64_t maximum) {
  const std::int64_t value = integer(name);
  if (value < minimum || value > maximum)
    fail("integer " + name_str(name) + " is " + std::to_string(value) + ", expected " +
         (minimum == maximum
              ? std::to_string(minimum)
              : "in [" + std::to_string(minimum) + ", " + std::to_string(maximum) + "]"));
  return value;
}

template <class T>
double StateReader<T>::real(const std::string& name) {
  const auto it = state_.reals.find(name);
  if (it == state_.reals.end()) fail("has no real " + name_str(name));
  used_.insert("r" + name);
  return it->second;
}

template <class T>
void StateReader<T>::finish() const {
  const auto check = [&](const auto& table, char kind, const char* kind_name) {
    for (const auto& entry : table)
      if (used_.count(kind + entry.first) == 0)
        fail("has an unexpected " + std::string(kind_name) + " " + name_str(entry.first) +
             " (not part of this object's state)");
  };
  check(state_.strings, 's', "string");
  check(state_.integers, 'i', "integer");
  check(state_.reals, 'r', "real");
  check(state_.arrays, 'a', "array");
}

template class StateReader<float>;
template class StateReader<double>;

}  // namespace xtgrad::optim::detail
