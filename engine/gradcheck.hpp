#pragma once
// gradcheck: validates analytic gradients against central finite differences,
// like torch.autograd.gradcheck (same default eps, atol and rtol).
//
// For y = f(inputs) and a random upstream gradient v (uniform in [-1, 1], not
// all ones, so that a wrong reduction cannot hide), the analytic gradient of
// <v, y> with respect to every element of every input is compared with
//   numeric = (<v, f(x + eps e)> - <v, f(x - eps e)>) / (2 eps)
// and must satisfy |analytic - numeric| <= atol + rtol * |numeric|.
// It also checks that backward is reentrant (a second backward on the same
// recording gives bit-identical gradients) and that a zero upstream gradient
// gives zero input gradients. Work in double, away from kinks (relu at 0).

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

#include "tape.hpp"

namespace xtgrad {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
  std::uint32_t seed = 20261129;  // for the random upstream gradient
};

struct GradcheckResult {
  bool passed = true;  // every element within tolerance, reentrant, zero-upstream clean
  bool within_tolerance = true;
  bool reentrant = true;
  bool zero_upstream_gives_zero = true;
  std::size_t elements_checked = 0;
  // The worst element: largest |analytic - numeric| / (atol + rtol * |numeric|).
  std::size_t worst_input = 0;
  std::vector<std::size_t> worst_index;
  double worst_analytic = 0.0;
  double worst_numeric = 0.0;
  double worst_ratio = 0.0;  // <= 1 means within tolerance

  // One readable paragraph, for test failure messages.
  std::string report() const;
};

// f records its computation on the tape of its arguments and returns the
// output; it is called once with gradients on and 2 * (number of input
// elements) more times without recording.
using GradcheckFunction = std::function<Var<double>(const std::vector<Var<double>>& inputs)>;

GradcheckResult gradcheck(const GradcheckFunction& f, const std::vector<xt::xarray<double>>& inputs,
                          const GradcheckOptions& options = {});

// gradgradcheck (torch.autograd.gradgradcheck): validates second derivatives,
// i.e. the GradRules (grad_rule.hpp) that backward with create_graph runs.
// With random v (for y) and u (for each input's gradient), both uniform in
// [-1, 1], g(x) = d<v, f(x)>/dx is recorded by tape.backward(y, v,
// xtgrad::create_graph), and the analytic d<u, g(x)>/dx (a backward through
// the recorded gradients) is compared, element by element of every input,
// with
//   numeric = (<u, g(x + eps e)> - <u, g(x - eps e)>) / (2 eps)
// where g is the first-order gradient of a plain backward; the same
// tolerance as gradcheck. An input that g does not depend on (f linear in it)
// gets 0. reentrant and zero_upstream_gives_zero are not checked (true).
// f is called once with create_graph and 2 * (number of input elements) more
// times with a plain backward.
GradcheckResult gradgradcheck(const GradcheckFunction& f,
                              const std::vector<xt::xarray<double>>& inputs,
                              const GradcheckOptions& options = {});

}  // namespace xtgrad
