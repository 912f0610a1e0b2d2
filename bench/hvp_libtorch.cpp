#include "hvp_libtorch.hpp"

#include <torch/torch.h>

#include <memory>

namespace xtgrad::bench {

std::function<void()> libtorch_hvp(const HvpProblem& problem,
                                   std::vector<std::vector<float>>* result) {
  struct State {
    torch::Tensor x, target;
    std::vector<torch::Tensor> params, v;
    std::vector<std::vector<float>>* result;
  };
  auto state = std::make_shared<State>();
  const auto n = static_cast<std::int64_t>(problem.tokens);
  auto tensor = [](const std::vector<float>& data, std::vector<std::int64_t> shape) {
    return torch::from_blob(const_cast<float*>(data.data()), shape, torch::kFloat32).clone();
  };
  const std::vector<std::size_t>& w = problem.widths;
  state->x = tensor(problem.x, {n, static_cast<std::int64_t>(w.front())});
  state->target = tensor(problem.target, {n, static_cast<std::int64_t>(w.back())});
  for (std::size_t l = 0; l + 1 < w.size(); ++l) {
    const auto out = static_cast<std::int64_t>(w[l + 1]), in = static_cast<std::int64_t>(w[l]);
    state->params.push_back(tensor(problem.params[2 * l], {out, in}).requires_grad_(true));
    state->params.push_back(tensor(problem.params[2 * l + 1], {out}).requires_grad_(true));
    state->v.push_back(tensor(problem.v[2 * l], {out, in}));
    state->v.push_back(tensor(problem.v[2 * l + 1], {out}));
  }
  state->result = result;
  return [state] {
    const std::size_t layers = state->params.size() / 2;
    torch::Tensor h = state->x;
    for (std::size_t l = 0; l < layers; ++l) {
      h = torch::nn::functional::linear(h, state->params[2 * l], state->params[2 * l + 1]);
      if (l + 1 < layers) h = torch::tanh(h);
    }
    const torch::Tensor loss = (h - state->target).pow(2).mean();
    const std::vector<torch::Tensor> g =
        torch::autograd::grad({loss}, state->params, {}, true, true);
    torch::Tensor dot = (g[0] * state->v[0]).sum();
    for (std::size_t k = 1; k < g.size(); ++k) dot = dot + (g[k] * state->v[k]).sum();
    const std::vector<torch::Tensor> hv = torch::autograd::grad({dot}, state->params);
    state->result->resize(hv.size());
    for (std::size_t k = 0; k < hv.size(); ++k) {
      const torch::Tensor c = hv[k].contiguous();
      (*state->result)[k].assign(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
    }
  };
}

}  // namespace xtgrad::bench
