// detail::Check, the declarative argument checks every op and module runs
// first: the exception type and the exact message of each kind.
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>

#include <xtgrad/engine/errors.hpp>
#include <xtgrad/engine/tape.hpp>

namespace {

using xtgrad::detail::Check;

// The message of the exception `call` throws as E; fails the test if it throws nothing or another
// type.
template <class E, class F>
std::string message_of(F&& call) {
  try {
    call();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL("threw another exception type: " << e.what());
    return {};
  }
  FAIL("threw nothing");
  return {};
}

}  // namespace

TEST_CASE("errors: a passing check throws nothing") {
  const Check check("linear");
  CHECK_NOTHROW(check.argument(true, "x", "never built"));
  CHECK_NOTHROW(check.shape(true, "w", xtgrad::Shape{2, 3}, "never built"));
  CHECK_NOTHROW(check.value(true, "never built"));
  CHECK_NOTHROW(check.logic(true, "never built"));
}

TEST_CASE("errors: argument names the function and the argument") {
  const Check check("dropout");
  CHECK(message_of<std::invalid_argument>([&] {
          check.argument(false, "p", "is ", 1.5, ", expected a value in [0, 1)");
        }) == "xtgrad::dropout: argument 'p' is 1.5, expected a value in [0, 1)");
}

TEST_CASE("errors: shape prints the shape it got and the parts expected") {
  const Check check("linear");
  const xtgrad::Shape got{3, 5};
  const xtgrad::Shape x{7, 4};
  CHECK(message_of<std::invalid_argument>(
            [&] { check.shape(false, "weight", got, "[out, ", x[1], "] for 'x' of shape ", x); }) ==
        "xtgrad::linear: argument 'weight' has shape [3, 5], expected [out, 4] for 'x' of "
        "shape [7, 4]");
}

TEST_CASE("errors: value and logic carry no argument name - logic is std::logic_error") {
  const Check check("load");
  CHECK(message_of<std::invalid_argument>([&] {
          check.value(false, "tensor ", std::string("w"), " missing");
        }) == "xtgrad::load: tensor w missing");
  const std::string logic =
      message_of<std::logic_error>([&] { check.logic(false, "tape was cleared"); });
  CHECK(logic == "xtgrad::load: tape was cleared");
  CHECK_THROWS_AS(check.logic(false, "x"), std::logic_error);
  bool is_invalid_argument = false;
  try {
    check.logic(false, "x");
  } catch (const std::invalid_argument&) {
    is_invalid_argument = true;
  } catch (const std::logic_error&) {
  }
  CHECK_FALSE(is_invalid_argument);
}

TEST_CASE("errors: message parts format integers, bools, floats and empty shapes") {
  using xtgrad::detail::message;
  CHECK(message("n = ", std::size_t{18446744073709551615u}, ", k = ", -3) ==
        "n = 18446744073709551615, k = -3");
  CHECK(message(true, "/", false) == "true/false");
  CHECK(message(1e-8, " ", 0.25f) == "1e-08 0.25");
  CHECK(message(xtgrad::Shape{}) == "[]");
}
