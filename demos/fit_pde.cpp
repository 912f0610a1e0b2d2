// fit_pde: a physics-informed network (Raissi, Perdikaris & Karniadakis 2019)
// solves the 1-D Poisson problem
//
//   u''(x) = -pi^2 sin(pi x)  on [0, 1],   u(0) = u(1) = 0,
//
// whose solution is u(x) = sin(pi x), without ever seeing that solution. A
// small MLP u(x) is trained with Adam on the residual of the equation at
// collocation points and on the two boundary values. u''(x) is the
// derivative of the network's output with respect to its input, taken twice
// with xtgrad::grad(..., create_graph) so that the loss on it can be
// differentiated once more with respect to the weights (third derivatives of
// the activation, through its derivative ops).
//
//   fit_pde [--activation silu|tanh] [--steps N] [--seed S]
//
// Prints the loss as it trains, then the largest |u(x) - sin(pi x)| over 201
// points of [0, 1] ("max error") and the training time.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>
#include <xtgrad/engine/engine.hpp>
#include <xtgrad/modules/linear.hpp>
#include <xtgrad/optim/adam.hpp>

#include "common/program.hpp"

namespace {

using namespace xtgrad;

constexpr double k_pi = 3.14159265358979323846;

struct Settings {
  std::string activation = "silu";
  int steps = 4000;
  std::uint64_t seed = 1;
};

// u(x) = W3 f(W2 f(W1 x + b1) + b2) + b3, x [N, 1] -> [N, 1], 32 hidden units.
class Network {
 public:
  Network(const std::string& activation, Generator& generator)
      : tanh_(activation == "tanh"),
        l1_(1, k_hidden, true, generator),
        l2_(k_hidden, k_hidden, true, generator),
        l3_(k_hidden, 1, true, generator) {}

  Var<double> operator()(const Var<double>& x) { return l3_(f(l2_(f(l1_(x))))); }

  std::vector<Parameter<double>*> parameters() {
    std::vector<Parameter<double>*> all;
    for (Linear<double>* l : {&l1_, &l2_, &l3_})
      for (Parameter<double>* p : l->parameters()) all.push_back(p);
    return all;
  }

 private:
  static constexpr std::size_t k_hidden = 32;
  Var<double> f(const Var<double>& h) const { return tanh_ ? xtgrad::tanh(h) : silu(h); }
  bool tanh_;
  Linear<double> l1_, l2_, l3_;
};

// n points of [lo, hi], evenly spaced, as a column [n, 1].
xt::xarray<double> column(std::size_t n, double lo, double hi) {
  xt::xarray<double> x = xt::xarray<double>::from_shape({n, 1});
  for (std::size_t i = 0; i < n; ++i) x(i, 0) = lo + (hi - lo) * double(i) / double(n - 1);
  return x;
}

// Trains `u` for `steps` steps with Adam; returns the seconds it took.
double fit(Network& u, int steps) {
  optim::Adam<double> adam(u.parameters(), optim::AdamOptions(3e-3));

  // Collocation points strictly inside (0, 1), and the right-hand side
  // divided by pi^2 (so that the residual is O(1)): u''/pi^2 = -sin(pi x).
  constexpr std::size_t k_points = 48;
  const xt::xarray<double> x_inner = column(k_points + 2, 0.0, 1.0);
  xt::xarray<double> x_col = xt::xarray<double>::from_shape({k_points, 1});
  xt::xarray<double> rhs = xt::xarray<double>::from_shape({k_points, 1});
  for (std::size_t i = 0; i < k_points; ++i) {
    x_col(i, 0) = x_inner(i + 1, 0);
    rhs(i, 0) = -std::sin(k_pi * x_col(i, 0));
  }
  const xt::xarray<double> x_edges = column(2, 0.0, 1.0);  // [[0], [1]]
  const xt::xarray<double> ones = xt::ones<double>(x_col.shape());

  Tape<double> tape;
  const auto start = std::chrono::steady_clock::now();
  for (int step = 1; step <= steps; ++step) {
    if (step == steps * 3 / 4) adam.set_lr(5e-4);  // a finer last quarter
    tape.clear();
    const Var<double> x = tape.leaf(x_col);
    const Var<double> y = u(x);  // [N, 1]; row i depends on x_i alone
    // u'(x) and u''(x) at every point: the gradient of sum_i u(x_i) with
    // respect to x, then of sum_i u'(x_i), both recorded for the next backward
    GradOptions<double> options{{ones}, /*create_graph=*/true};
    const Var<double> du = grad(tape, {y}, {x}, options)[0];
    const Var<double> d2u = grad(tape, {du}, {x}, options)[0];
    const Var<double> residual = mse(d2u / (k_pi * k_pi), tape.leaf(rhs, false));
    const Var<double> boundary =
        mse(u(tape.leaf(x_edges, false)),
            tape.leaf(xt::xarray<double>(xt::zeros<double>(x_edges.shape())), false));
    const Var<double> loss = residual + boundary;
    adam.zero_grad();
    tape.backward(loss);  // through u'' to the weights: third derivatives of f
    adam.step();
    if (step % 500 == 0 || step == 1)
      std::cout << "step " << step << "  loss " << loss.value()() << "  (residual "
                << residual.value()() << ", boundary " << boundary.value()() << ")\n";
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  demos::Program program(
      argc, argv, "fit_pde",
      "Solve u'' = -pi^2 sin(pi x), u(0) = u(1) = 0, with a physics-informed MLP");
  Settings settings;
  program.add("--activation", settings.activation, "silu or tanh", CLI::IsMember({"silu", "tanh"}));
  program.add("--steps", settings.steps, "Adam steps", CLI::Range(1, 999999999));
  program.add("--seed", settings.seed, "seed of the initialization", CLI::NonNegativeNumber);
  if (const auto code = program.parse(argc, argv)) return *code;
  return program.run([&] {
    program.start_compute("f32");  // the machine line
    Generator generator(settings.seed);
    Network u(settings.activation, generator);
    const double seconds = fit(u, settings.steps);

    // The trained network against sin(pi x) on a fine grid.
    Tape<double> tape;
    NoGradGuard<double> no_grad(tape);
    const xt::xarray<double> x_test = column(201, 0.0, 1.0);
    const xt::xarray<double> u_test = u(tape.leaf(x_test, false)).value();
    double max_error = 0.0;
    for (std::size_t i = 0; i < x_test.shape()[0]; ++i)
      max_error = std::max(max_error, std::abs(u_test(i, 0) - std::sin(k_pi * x_test(i, 0))));
    std::cout << "activation " << settings.activation << ", " << settings.steps << " steps in "
              << seconds << " s\n"
              << "max error " << max_error << "\n";
    return 0;
  });
}
