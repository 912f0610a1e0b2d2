#pragma once
// The machinery of the bad-input tables (tests/hardening/test_bad_input_*.cpp):
// every public function and constructor against wrong ranks, a wrong size in
// each argument in turn, empty and stale handles, Vars of two tapes, unknown
// activations, zero sizes and out-of-range hyperparameters. Each row must
// throw exactly the documented exception type (not a subclass, not a base)
// with a message naming the function, the argument and what was expected,
// and a snapshot of everything the call could touch (input values and
// gradients, tape sizes, Parameters, optimizer state and learning rate,
// files) must be bit-identical before and after.
//
// The rows are data: a label, the call, the expected type and the parts
// its message must contain. Each test case reports its row count.

#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include <xtensor/xarray.hpp>
#include <xtgrad/engine/parameter.hpp>
#include <xtgrad/engine/tape.hpp>

namespace xtgrad::testing {

inline constexpr double k_nan = std::numeric_limits<double>::quiet_NaN();
inline constexpr double k_inf = std::numeric_limits<double>::infinity();

// ---------------------------------------------------------------- the table runner

enum class Expect { invalid_argument, logic_error, runtime_error, out_of_range };

inline std::string name_of(Expect e) {
  switch (e) {
    case Expect::invalid_argument:
      return "std::invalid_argument";
    case Expect::logic_error:
      return "std::logic_error";
    case Expect::runtime_error:
      return "std::runtime_error";
    case Expect::out_of_range:
      return "std::out_of_range";
  }
  return "?";
}

// The exact dynamic type: std::invalid_argument is a std::logic_error, so a
// catch clause alone cannot tell them apart.
inline bool is_exactly(const std::exception& e, Expect expected) {
  switch (expected) {
    case Expect::invalid_argument:
      return typeid(e) == typeid(std::invalid_argument);
    case Expect::logic_error:
      return typeid(e) == typeid(std::logic_error);
    case Expect::runtime_error:
      return typeid(e) == typeid(std::runtime_error);
    case Expect::out_of_range:
      return typeid(e) == typeid(std::out_of_range);
  }
  return false;
}

inline std::string dynamic_name(const std::exception& e) {
  if (typeid(e) == typeid(std::invalid_argument)) return "std::invalid_argument";
  if (typeid(e) == typeid(std::logic_error)) return "std::logic_error";
  if (typeid(e) == typeid(std::runtime_error)) return "std::runtime_error";
  if (typeid(e) == typeid(std::out_of_range)) return "std::out_of_range";
  return typeid(e).name();
}

struct Row {
  std::string label;
  std::function<void()> call;
  Expect expect;
  std::vector<std::string> parts;  // each must appear in what()
  // Optional: puts the misuse in place before the snapshot, and undoes it after.
  std::function<void()> setup = nullptr;
  std::function<void()> teardown = nullptr;
};

// Everything a failed call must leave alone, as comparable bytes.
class State {
 public:
  template <class T>
  void add(const xt::xarray<T>& a) {
    std::string item(reinterpret_cast<const char*>(a.shape().data()),
                     a.shape().size() * sizeof(std::size_t));
    item += '|';
    if (a.size() > 0) item.append(reinterpret_cast<const char*>(a.data()), a.size() * sizeof(T));
    items_.push_back(std::move(item));
  }
  template <class T>
  void add(const Parameter<T>& p) {
    items_.push_back(p.name + (p.has_grad ? "+grad" : "-grad"));
    add(p.value);
    add(p.grad);
  }
  // A live Var: its value and gradient (leaves only: an intermediate's
  // gradient is scratch space that the next backward rewrites).
  template <class T>
  void add(const Var<T>& v) {
    add(v.value());
    add(v.grad());
  }
  void add(double x) { items_.push_back("d" + std::to_string(x)); }
  void add(std::size_t n) { items_.push_back("n" + std::to_string(n)); }
  void add(const std::string& s) { items_.push_back("s" + s); }
  bool operator==(const State& other) const { return items_ == other.items_; }

 private:
  std::vector<std::string> items_;
};

// The snapshot of a Var table: the size of each of `tapes` and the value and
// gradient of each of `leaves` (copied handles, so the list may be a
// temporary).
template <class T>
std::function<State()> snapshot_of(std::vector<const Tape<T>*> tapes, std::vector<Var<T>> leaves) {
  return [tapes = std::move(tapes), leaves = std::move(leaves)] {
    State s;
    for (const Tape<T>* tape : tapes) s.add(tape->size());
    for (const Var<T>& v : leaves) s.add(v);
    return s;
  };
}

// bad(label, call, expected type, message parts): appends one row, without
// setup or teardown, to `rows`.
inline auto row_adder(std::vector<Row>& rows) {
  return [&rows](std::string label, std::function<void()> call, Expect e,
                 std::vector<std::string> parts) {
    rows.push_back({std::move(label), std::move(call), e, std::move(parts)});
  };
}

// Runs every row; returns how many ran.
inline std::size_t run_rows(const std::vector<Row>& rows, const std::function<State()>& snapshot) {
  for (const Row& row : rows) {
    INFO("row: " << row.label);
    if (row.setup) row.setup();
    const State before = snapshot();
    bool thrown = false;
    try {
      row.call();
    } catch (const std::exception& e) {
      thrown = true;
      const std::string what = e.what();
      INFO("threw " << dynamic_name(e) << ": " << what);
      CHECK_MESSAGE(is_exactly(e, row.expect), "expected exactly " << name_of(row.expect));
      for (const std::string& part : row.parts)
        CHECK_MESSAGE(what.find(part) != std::string::npos, "message lacks \"" << part << "\"");
    } catch (...) {
      thrown = true;
      FAIL_CHECK("threw something that is not a std::exception");
    }
    CHECK_MESSAGE(thrown, "did not throw (expected " << name_of(row.expect) << ")");
    CHECK_MESSAGE(snapshot() == before, "the call changed its inputs or state");
    if (row.teardown) row.teardown();
  }
  return rows.size();
}

inline std::string q(const std::string& arg) {
  return "'" + arg + "'";
}

// For a function of several Vars: one row per argument with an empty handle,
// one with a handle of a cleared tape and (with two or more Vars) one with a
// Var of another tape. `call` receives the arguments, one of them replaced.
template <class T>
void add_handle_rows(std::vector<Row>& rows, const std::string& fn,
                     const std::vector<std::string>& names, const std::vector<Var<T>>& good,
                     std::function<void(const std::vector<Var<T>>&)> call, Tape<T>& other,
                     const Var<T>& stale) {
  for (std::size_t i = 0; i < good.size(); ++i) {
    auto with = [good, call, i](Var<T> replacement) {
      return [good, call, i, replacement] {
        std::vector<Var<T>> args = good;
        args[i] = replacement;
        call(args);
      };
    };
    rows.push_back({fn + ": empty Var as " + names[i],
                    with(Var<T>()),
                    Expect::logic_error,
                    {fn, q(names[i]), "empty Var handle"}});
    rows.push_back({fn + ": Var of a cleared tape as " + names[i],
                    with(stale),
                    Expect::logic_error,
                    {fn, q(names[i]), "cleared", "record the computation"}});
    if (good.size() > 1)
      rows.push_back({fn + ": Var of another tape as " + names[i],
                      with(other.leaf(good[i].value())),
                      Expect::logic_error,
                      {fn, q(names[i]), "different tapes"}});
  }
}

template <class T>
std::optional<Var<T>> opt(const Var<T>& v) {
  return v;
}

inline void report(const std::string& table, std::size_t rows) {
  MESSAGE(table << ": " << rows << " bad-input cases");
}

inline std::vector<std::string> directory_listing(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir))
    names.push_back(entry.path().lexically_relative(dir).string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace xtgrad::testing
