#pragma once
// The Var-aware checks every op runs first, before it records anything:
// that its arguments are live handles of one tape (std::logic_error
// otherwise). Message formatting and the exception helpers are in errors.hpp.

#include <initializer_list>
#include <string>
#include <utility>

#include "errors.hpp"
#include "tape.hpp"

namespace xtgrad::detail {

// The one tape all arguments of an op live on; std::logic_error when they
// come from different tapes, a handle is stale (cleared tape, empty Var), or
// an argument is a Parameter whose shape changed since it was recorded.
template <class T>
Tape<T>& common_tape(const char* op,
                     std::initializer_list<std::pair<const char*, const Var<T>*>> args) {
  Tape<T>* tape = nullptr;
  const char* first_arg = nullptr;
  for (const auto& [name, var] : args) {
    if (var == nullptr) continue;          // an absent optional argument
    Tape<T>& t = var->tape_for(op, name);  // throws for an empty or stale handle
    if (tape == nullptr) {
      tape = &t;
      first_arg = name;
    } else if (tape != &t) {
      fail_logic(op, "arguments " + quoted(first_arg) + " and " + quoted(name) +
                         " live on different tapes; record all inputs of one computation on "
                         "the same Tape");
    }
  }
  if (tape == nullptr) fail_logic(op, "no arguments");
  return *tape;
}

}  // namespace xtgrad::detail
