#pragma once
// The checks every op runs first. Each failure names the op, the argument and
// what was expected, in every build type (Stan Math's check_* style).

#include <cstddef>
#include <initializer_list>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "tape.hpp"

namespace xtgrad::detail {

template <class S>
std::string shape_str(const S& shape) {
  std::ostringstream out;
  out << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

[[noreturn]] inline void fail_argument(const std::string& op, const std::string& arg,
                                       const std::string& message) {
  throw std::invalid_argument("xtgrad::" + op + ": argument '" + arg + "' " + message);
}

// "argument 'w1' has shape [3, 5], expected [4, 5] (...)".
template <class S>
[[noreturn]] void fail_shape(const std::string& op, const std::string& arg, const S& got,
                             const std::string& expected) {
  fail_argument(op, arg, "has shape " + shape_str(got) + ", expected " + expected);
}

// The one tape all arguments of an op live on; std::logic_error when they
// come from different tapes or a handle is stale (cleared tape, empty Var).
template <class T>
Tape<T>& common_tape(const char* op,
                     std::initializer_list<std::pair<const char*, const Var<T>*>> args) {
  Tape<T>* tape = nullptr;
  const char* first_arg = nullptr;
  for (const auto& [name, var] : args) {
    if (var == nullptr) continue;  // an absent optional argument
    Tape<T>& t = var->tape_for(op, name);  // throws for an empty or stale handle
    if (tape == nullptr) {
      tape = &t;
      first_arg = name;
    } else if (tape != &t) {
      throw std::logic_error(std::string("xtgrad::") + op + ": arguments '" + first_arg +
                             "' and '" + name +
                             "' live on different tapes; record all inputs of one "
                             "computation on the same Tape");
    }
  }
  if (tape == nullptr) throw std::logic_error(std::string("xtgrad::") + op + ": no arguments");
  return *tape;
}

// Rows of a [..., features] tensor seen as a [rows, features] matrix.
inline std::size_t rows_of(std::size_t size, std::size_t features) {
  return features == 0 ? 0 : size / features;
}

}  // namespace xtgrad::detail
