#include "gradcheck.hpp"

#include <cmath>
#include <random>
#include <sstream>
#include <stdexcept>

#include <xtensor/xview.hpp>

#include "errors.hpp"

namespace xtgrad {

namespace {

// <v, f(inputs)> evaluated without recording a backward.
double weighted_output(const GradcheckFunction& f, const std::vector<xt::xarray<double>>& inputs,
                       const xt::xarray<double>& v) {
  Tape<double> tape;
  NoGradGuard<double> no_grad(tape);
  std::vector<Var<double>> vars;
  vars.reserve(inputs.size());
  for (const auto& input : inputs) vars.push_back(tape.leaf(input, false));
  const xt::xarray<double>& y = f(vars).value();
  double total = 0.0;
  for (std::size_t i = 0; i < y.size(); ++i) total += v.data()[i] * y.data()[i];
  return total;
}

std::vector<std::size_t> unravel(std::size_t flat, const Shape& shape) {
  std::vector<std::size_t> index(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    index[d] = shape[d] == 0 ? 0 : flat % shape[d];
    flat = shape[d] == 0 ? 0 : flat / shape[d];
  }
  return index;
}

}  // namespace

std::string GradcheckResult::report() const {
  std::ostringstream out;
  out << "gradcheck " << (passed ? "passed" : "FAILED") << ": " << elements_checked
      << " elements checked";
  if (elements_checked > 0) {
    out << "; worst is input " << worst_input << " at " << detail::shape_str(worst_index)
        << ": analytic " << worst_analytic << ", numeric " << worst_numeric << " (error "
        << std::abs(worst_analytic - worst_numeric) << ", " << worst_ratio << " of the tolerance)";
  }
  if (!reentrant) out << "; a second backward gave different gradients";
  if (!zero_upstream_gives_zero) out << "; a zero upstream gradient gave nonzero gradients";
  return out.str();
}

GradcheckResult gradcheck(const GradcheckFunction& f, const std::vector<xt::xarray<double>>& inputs,
                          const GradcheckOptions& options) {
  const auto check_option = [](const char* name, double value, bool ok, const char* expected) {
    if (!ok)
      detail::fail_argument("gradcheck", std::string("options.") + name,
                            "is " + detail::number_str(value) + ", expected " + expected);
  };
  check_option("eps", options.eps, std::isfinite(options.eps) && options.eps > 0.0,
               "a finite number > 0");
  check_option("atol", options.atol, std::isfinite(options.atol) && options.atol >= 0.0,
               "a finite number >= 0");
  check_option("rtol", options.rtol, std::isfinite(options.rtol) && options.rtol >= 0.0,
               "a finite number >= 0");

  Tape<double> tape;
  std::vector<Var<double>> vars;
  vars.reserve(inputs.size());
  for (const auto& input : inputs) vars.push_back(tape.leaf(input, true));
  const Var<double> y = f(vars);
  if (&y.tape() != &tape)
    detail::fail_logic("gradcheck", "f must record on the tape of its arguments");

  std::mt19937 generator(options.seed);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  xt::xarray<double> v = xt::empty<double>(y.shape());
  for (auto& element : v) element = uniform(generator);

  GradcheckResult result;
  std::vector<xt::xarray<double>> analytic;
  if (y.requires_grad()) tape.backward(y, v);
  for (const auto& var : vars) analytic.push_back(var.grad());

  if (y.requires_grad()) {
    tape.zero_grad();
    tape.backward(y, v);
    for (std::size_t i = 0; i < vars.size(); ++i)
      if (vars[i].grad() != analytic[i]) result.reentrant = false;
    tape.zero_grad();
    tape.backward(y, xt::zeros<double>(y.shape()));
    for (const auto& var : vars)
      for (double g : var.grad())
        if (g != 0.0) result.zero_upstream_gives_zero = false;
  }

  std::vector<xt::xarray<double>> perturbed = inputs;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    for (std::size_t j = 0; j < inputs[i].size(); ++j) {
      const double original = inputs[i].data()[j];
      perturbed[i].data()[j] = original + options.eps;
      const double plus = weighted_output(f, perturbed, v);
      perturbed[i].data()[j] = original - options.eps;
      const double minus = weighted_output(f, perturbed, v);
      perturbed[i].data()[j] = original;

      const double numeric = (plus - minus) / (2.0 * options.eps);
      const double exact = analytic[i].data()[j];
      const double tolerance = options.atol + options.rtol * std::abs(numeric);
      double ratio = std::abs(exact - numeric) / tolerance;
      if (std::isnan(ratio)) ratio = INFINITY;
      ++result.elements_checked;
      if (result.elements_checked == 1 || ratio > result.worst_ratio) {
        result.worst_ratio = ratio;
        result.worst_input = i;
        result.worst_index = unravel(j, inputs[i].shape());
        result.worst_analytic = exact;
        result.worst_numeric = numeric;
      }
    }
  }
  result.within_tolerance = result.worst_ratio <= 1.0;
  result.passed = result.within_tolerance && result.reentrant && result.zero_upstream_gives_zero;
  return result;
}

}  // namespace xtgrad
