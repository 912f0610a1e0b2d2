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

// The gradients d<v, f(inputs)>/d(inputs) of a plain backward (zeros for an
// input no gradient reaches), weighted by us: sum_k <us[k], grad_k>.
double weighted_gradient(const GradcheckFunction& f, const std::vector<xt::xarray<double>>& inputs,
                         const xt::xarray<double>& v, const std::vector<xt::xarray<double>>& us) {
  Tape<double> tape;
  std::vector<Var<double>> vars;
  vars.reserve(inputs.size());
  for (const auto& input : inputs) vars.push_back(tape.leaf(input, true));
  const Var<double> y = f(vars);
  if (!y.requires_grad()) return 0.0;
  tape.backward(y, v);
  double total = 0.0;
  for (std::size_t k = 0; k < vars.size(); ++k) {
    const xt::xarray<double>& g = vars[k].grad();
    for (std::size_t i = 0; i < g.size(); ++i) total += us[k].data()[i] * g.data()[i];
  }
  return total;
}

xt::xarray<double> uniform_like(const Shape& shape, std::mt19937& generator) {
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  xt::xarray<double> a = xt::empty<double>(shape);
  for (auto& element : a) element = uniform(generator);
  return a;
}

// Records the inputs as leaves that require gradients and f over them;
// refuses an f that records elsewhere.
Var<double> record_function(const char* function, const GradcheckFunction& f,
                            const std::vector<xt::xarray<double>>& inputs, Tape<double>& tape,
                            std::vector<Var<double>>& vars) {
  vars.reserve(inputs.size());
  for (const auto& input : inputs) vars.push_back(tape.leaf(input, true));
  const Var<double> y = f(vars);
  if (&y.tape() != &tape)
    detail::fail_logic(function, "f must record on the tape of its arguments");
  return y;
}

void check_options(const char* function, const GradcheckOptions& options) {
  const auto check_option = [function](const char* name, double value, bool ok,
                                       const char* expected) {
    if (!ok)
      detail::fail_argument(function, std::string("options.") + name,
                            "is " + detail::number_str(value) + ", expected " + expected);
  };
  check_option("eps", options.eps, std::isfinite(options.eps) && options.eps > 0.0,
               "a finite number > 0");
  check_option("atol", options.atol, std::isfinite(options.atol) && options.atol >= 0.0,
               "a finite number >= 0");
  check_option("rtol", options.rtol, std::isfinite(options.rtol) && options.rtol >= 0.0,
               "a finite number >= 0");
}

// Records |analytic - numeric| against the tolerance into result.
void compare(GradcheckResult& result, const GradcheckOptions& options, std::size_t input,
             const Shape& shape, std::size_t j, double exact, double numeric);

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
  check_options("gradcheck", options);

  Tape<double> tape;
  std::vector<Var<double>> vars;
  const Var<double> y = record_function("gradcheck", f, inputs, tape, vars);

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
      compare(result, options, i, inputs[i].shape(), j, analytic[i].data()[j], numeric);
    }
  }
  result.within_tolerance = result.worst_ratio <= 1.0;
  result.passed = result.within_tolerance && result.reentrant && result.zero_upstream_gives_zero;
  return result;
}

namespace {

void compare(GradcheckResult& result, const GradcheckOptions& options, std::size_t input,
             const Shape& shape, std::size_t j, double exact, double numeric) {
  const double tolerance = options.atol + options.rtol * std::abs(numeric);
  double ratio = std::abs(exact - numeric) / tolerance;
  if (std::isnan(ratio)) ratio = INFINITY;
  ++result.elements_checked;
  if (result.elements_checked == 1 || ratio > result.worst_ratio) {
    result.worst_ratio = ratio;
    result.worst_input = input;
    result.worst_index = unravel(j, shape);
    result.worst_analytic = exact;
    result.worst_numeric = numeric;
  }
}

}  // namespace

GradcheckResult gradgradcheck(const GradcheckFunction& f,
                              const std::vector<xt::xarray<double>>& inputs,
                              const GradcheckOptions& options) {
  check_options("gradgradcheck", options);
  Tape<double> tape;
  std::vector<Var<double>> vars;
  const Var<double> y = record_function("gradgradcheck", f, inputs, tape, vars);
  std::mt19937 generator(options.seed);
  const xt::xarray<double> v = uniform_like(y.shape(), generator);
  std::vector<xt::xarray<double>> us;
  for (const auto& input : inputs) us.push_back(uniform_like(input.shape(), generator));

  // Analytic: g_k = d<v, y>/dx_k as Vars, then the sum over k of backward(g_k, u_k)
  // (leaves accumulate across the backward calls).
  std::vector<xt::xarray<double>> analytic;
  for (const auto& input : inputs) analytic.push_back(xt::zeros<double>(input.shape()));
  if (y.requires_grad()) {
    tape.backward(y, v, create_graph);
    std::vector<Var<double>> gs;  // the gradients that depend on an input
    std::vector<std::size_t> of;
    for (std::size_t k = 0; k < vars.size(); ++k)
      if (tape.node_has_grad(vars[k].index()) && vars[k].grad_var().requires_grad()) {
        gs.push_back(vars[k].grad_var());
        of.push_back(k);
      }
    tape.zero_grad();
    for (std::size_t n = 0; n < gs.size(); ++n) tape.backward(gs[n], us[of[n]]);
    for (std::size_t k = 0; k < vars.size(); ++k) analytic[k] = vars[k].grad();
  }

  GradcheckResult result;
  std::vector<xt::xarray<double>> perturbed = inputs;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    for (std::size_t j = 0; j < inputs[i].size(); ++j) {
      const double original = inputs[i].data()[j];
      perturbed[i].data()[j] = original + options.eps;
      const double plus = weighted_gradient(f, perturbed, v, us);
      perturbed[i].data()[j] = original - options.eps;
      const double minus = weighted_gradient(f, perturbed, v, us);
      perturbed[i].data()[j] = original;
      const double numeric = (plus - minus) / (2.0 * options.eps);
      compare(result, options, i, inputs[i].shape(), j, analytic[i].data()[j], numeric);
    }
  }
  result.within_tolerance = result.worst_ratio <= 1.0;
  result.passed = result.within_tolerance;
  return result;
}

}  // namespace xtgrad
