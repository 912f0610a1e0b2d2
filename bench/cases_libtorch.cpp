// The LibTorch side of bench_xtgrad (CMake option XTGRAD_BENCH_LIBTORCH): the
// same shapes and steps written as a LibTorch user would write them, with
// LibTorch's fastest settings (zero_grad(set_to_none), no copies of inputs).
#include <torch/torch.h>

#include <ATen/Parallel.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cases.hpp"

namespace xtgrad::bench {

namespace {

constexpr std::int64_t k_seed = 7;
constexpr std::int64_t k_toy_tokens = 128;
constexpr std::int64_t k_toy_model = 2;
constexpr std::int64_t k_toy_hidden = 16;
constexpr double k_toy_lr = 1e-2;
constexpr double k_fashion_lr = 1e-3;
constexpr double k_fashion_weight_decay = 1e-2;
constexpr double k_fashion_label_smoothing = 0.1;
constexpr double k_fashion_dropout = 0.1;
constexpr std::int64_t k_pixels = 784, k_classes = 10;

struct FfnState {
  Family family;
  Pass pass;
  torch::nn::Linear first{nullptr}, second{nullptr}, third{nullptr};
  torch::Tensor x, dy;

  torch::Tensor forward() {
    switch (family) {
      case Family::relu:
        return second(torch::relu(first(x)));
      case Family::gelu:
        return second(torch::gelu(first(x)));  // approximate = "none": the exact GELU
      case Family::swiglu:                     // first = up, second = gate, third = down
        return third(first(x) * torch::silu(second(x)));
    }
    return {};
  }

  void zero_grad() {
    for (torch::nn::Linear* l : {&first, &second, &third})
      if (!l->is_empty()) (*l)->zero_grad(/*set_to_none=*/true);
    x.mutable_grad() = torch::Tensor();
  }

  void run() {
    if (pass == Pass::inference) {
      const torch::NoGradGuard no_grad;
      forward();
      return;
    }
    if (pass == Pass::forward) {
      forward();
      return;
    }
    zero_grad();
    forward().backward(dy);
  }
};

struct ToyState {
  torch::nn::Linear first{k_toy_model, k_toy_hidden}, second{k_toy_hidden, k_toy_model};
  std::unique_ptr<torch::optim::Adam> adam;
  torch::Tensor x, target;

  ToyState() {
    std::vector<torch::Tensor> params = first->parameters();
    for (const torch::Tensor& p : second->parameters()) params.push_back(p);
    adam = std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(k_toy_lr));
    x = torch::rand({k_toy_tokens, k_toy_model}) * 2 - 1;
    const torch::Tensor x1 = x.select(1, 0), x2 = x.select(1, 1);
    target = torch::stack({x1.abs() + 0.3 * x2, torch::relu(x2 - 0.2) - 0.4 * x1}, 1);
  }

  void run() {
    adam->zero_grad();
    torch::Tensor loss = torch::mse_loss(second(torch::relu(first(x))), target);
    loss.backward();
    adam->step();
  }
};

struct RowwiseState {
  RowOp op;
  Pass pass;
  torch::Tensor x, weight, bias, target, dy;

  torch::Tensor forward() {
    switch (op) {
      case RowOp::layer_norm:
        return torch::layer_norm(x, {x.size(-1)}, weight, bias, 1e-5);
      case RowOp::rms_norm:  // LLaMA's RMSNorm.forward
        return x * torch::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + 1e-6) * weight;
      case RowOp::softmax:
        return torch::softmax(x, -1);
      case RowOp::log_softmax:
        return torch::log_softmax(x, -1);
      case RowOp::cross_entropy:
        return torch::cross_entropy_loss(x, target);
    }
    return {};
  }

  void run() {
    if (pass == Pass::forward) {
      forward();
      return;
    }
    for (torch::Tensor* t : {&x, &weight, &bias}) t->mutable_grad() = torch::Tensor();
    if (op == RowOp::cross_entropy)
      forward().backward();
    else
      forward().backward(dy);
  }
};

// reference_torch.py's Mlp: 784 -> 256 -> 256 -> 10, exact GELU, dropout.
struct MlpImpl : torch::nn::Module {
  torch::nn::Linear fc1{k_pixels, 256}, fc2{256, 256}, fc3{256, k_classes};
  MlpImpl() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_module("fc3", fc3);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    namespace F = torch::nn::functional;
    const auto drop = F::DropoutFuncOptions().p(k_fashion_dropout).training(is_training());
    const torch::Tensor h = F::dropout(torch::gelu(fc1(x)), drop);
    return fc3(F::dropout(torch::gelu(fc2(h)), drop));
  }
};

// Linear, exact GELU, Linear.
torch::nn::Sequential ffn(std::int64_t d, std::int64_t h) {
  return torch::nn::Sequential(torch::nn::Linear(d, h), torch::nn::GELU(), torch::nn::Linear(h, d));
}

// reference_torch.py's Block and Mixer: patch 4, width 128, 4 blocks, token
// hidden 64, channel hidden 256.
struct MixerImpl : torch::nn::Module {
  static constexpr std::int64_t patch = 4, grid = 7, tokens = grid * grid, width = 128;
  struct Block {
    torch::nn::LayerNorm token_norm{torch::nn::LayerNormOptions({width})};
    torch::nn::Sequential token_mlp = ffn(tokens, 64);
    torch::nn::LayerNorm channel_norm{torch::nn::LayerNormOptions({width})};
    torch::nn::Sequential channel_mlp = ffn(width, 256);
  };
  torch::nn::Linear embed{patch * patch, width};
  std::vector<Block> blocks = std::vector<Block>(4);
  torch::nn::LayerNorm final_norm{torch::nn::LayerNormOptions({width})};
  torch::nn::Linear head{width, k_classes};

  MixerImpl() {
    register_module("embed", embed);
    for (std::size_t b = 0; b < blocks.size(); ++b) {
      const std::string prefix = "blocks_" + std::to_string(b) + "_";
      register_module(prefix + "token_norm", blocks[b].token_norm);
      register_module(prefix + "token_mlp", blocks[b].token_mlp);
      register_module(prefix + "channel_norm", blocks[b].channel_norm);
      register_module(prefix + "channel_mlp", blocks[b].channel_mlp);
    }
    register_module("final_norm", final_norm);
    register_module("head", head);
  }
  torch::Tensor forward(const torch::Tensor& images) {
    const std::int64_t n = images.size(0);
    torch::Tensor x = images.reshape({n, grid, patch, grid, patch})
                          .permute({0, 1, 3, 2, 4})
                          .reshape({n, tokens, patch * patch});
    x = embed(x);
    for (Block& b : blocks) {
      x = x + b.token_mlp->forward(b.token_norm(x).transpose(1, 2)).transpose(1, 2);
      x = x + b.channel_mlp->forward(b.channel_norm(x));
    }
    return head(final_norm(x).mean(1));
  }
};

struct FashionState {
  std::shared_ptr<torch::nn::Module> module;
  std::function<torch::Tensor(const torch::Tensor&)> forward;
  std::vector<torch::Tensor> parameters;
  std::unique_ptr<torch::optim::AdamW> optimizer;
  torch::Tensor x, labels;

  void run() {
    namespace F = torch::nn::functional;
    const torch::Tensor loss =
        F::cross_entropy(forward(x), labels,
                         F::CrossEntropyFuncOptions().label_smoothing(k_fashion_label_smoothing));
    // zero_grad(set_to_none=True), as reference_torch.py (LibTorch 1.13's
    // Optimizer::zero_grad fills with zeros instead).
    for (torch::Tensor& p : parameters) p.mutable_grad() = torch::Tensor();
    loss.backward();
    optimizer->step();
  }
};

}  // namespace

Runner libtorch_fashion_step(FashionModel model) {
  auto state = std::make_shared<FashionState>();
  if (model == FashionModel::mlp) {
    auto mlp = std::make_shared<MlpImpl>();
    state->forward = [mlp](const torch::Tensor& x) { return mlp->forward(x); };
    state->module = mlp;
  } else {
    auto mixer = std::make_shared<MixerImpl>();
    state->forward = [mixer](const torch::Tensor& x) { return mixer->forward(x); };
    state->module = mixer;
  }
  state->module->train(true);
  state->parameters = state->module->parameters();
  state->optimizer = std::make_unique<torch::optim::AdamW>(
      state->parameters,
      torch::optim::AdamWOptions(k_fashion_lr).weight_decay(k_fashion_weight_decay));
  const auto batch = static_cast<std::int64_t>(k_fashion_batch);
  state->x = torch::randn({batch, k_pixels});
  state->labels = torch::randint(k_classes, {batch}, torch::kLong);
  return [state] { state->run(); };
}

void libtorch_set_threads(int threads) {
  torch::set_num_threads(threads);
}

std::string init_libtorch(int threads) {
  torch::set_num_threads(threads);
  at::set_num_interop_threads(1);  // one thread for inter-op work, as xtgrad has
  torch::manual_seed(k_seed);
  return TORCH_VERSION;
}

Runner libtorch_ffn(Family family, Pass pass, FfnShape shape) {
  auto state = std::make_shared<FfnState>();
  state->family = family;
  state->pass = pass;
  const auto d = static_cast<std::int64_t>(shape.d_model);
  const auto h = static_cast<std::int64_t>(shape.d_hidden);
  const auto n = static_cast<std::int64_t>(shape.tokens);
  if (family == Family::swiglu) {
    state->first = torch::nn::Linear(torch::nn::LinearOptions(d, h).bias(false));
    state->second = torch::nn::Linear(torch::nn::LinearOptions(d, h).bias(false));
    state->third = torch::nn::Linear(torch::nn::LinearOptions(h, d).bias(false));
  } else {
    state->first = torch::nn::Linear(d, h);
    state->second = torch::nn::Linear(h, d);
  }
  state->x = torch::rand({n, d}) * 2 - 1;
  state->x.requires_grad_(pass == Pass::forward_backward);
  state->dy = torch::rand({n, d}) * 2 - 1;
  return [state] { state->run(); };
}

Runner libtorch_toy_step() {
  auto state = std::make_shared<ToyState>();
  return [state] { state->run(); };
}

Runner libtorch_activation(Activation activation, Pass pass, std::size_t n) {
  if (activation == Activation::gelu_sigmoid) return {};  // no such op in LibTorch
  // The kernels alone: the *_out variants write into a preallocated tensor
  // (torch::gelu(x) would also allocate, and page-fault, 16 MB per call).
  const auto size = static_cast<std::int64_t>(n);
  const torch::Tensor x = torch::rand({size}) * 12 - 6;
  const torch::Tensor dy = torch::rand({size}) * 2 - 1;
  torch::Tensor out = torch::empty({size});
  if (pass == Pass::forward) {
    switch (activation) {
      case Activation::relu:
        return [x, out]() mutable { at::relu_out(out, x); };
      case Activation::gelu:
        return [x, out]() mutable { at::gelu_out(out, x); };
      case Activation::gelu_tanh:
        return [x, out]() mutable { at::gelu_out(out, x, "tanh"); };
      case Activation::silu:
        return [x, out]() mutable { at::silu_out(out, x); };
      default:
        return {};
    }
  }
  // The backward kernels autograd calls for these ops.
  switch (activation) {
    case Activation::relu:  // relu saves its result; y > 0 exactly where x > 0
      return [x, dy, out]() mutable { at::threshold_backward_out(out, dy, x, 0); };
    case Activation::gelu:
      return [x, dy, out]() mutable { at::gelu_backward_out(out, dy, x); };
    case Activation::gelu_tanh:
      return [x, dy, out]() mutable { at::gelu_backward_out(out, dy, x, "tanh"); };
    case Activation::silu:
      return [x, dy, out]() mutable { at::silu_backward_out(out, dy, x); };
    default:
      return {};
  }
}

}  // namespace xtgrad::bench

namespace xtgrad::bench {

Runner libtorch_rowwise(RowOp op, Pass pass, RowShape shape) {
  auto state = std::make_shared<RowwiseState>();
  state->op = op;
  state->pass = pass;
  const auto n = static_cast<std::int64_t>(shape.rows), d = static_cast<std::int64_t>(shape.cols);
  state->x = (torch::rand({n, d}) * 8 - 4).requires_grad_(true);
  state->weight = (torch::rand({d}) * 2 - 1).requires_grad_(true);
  state->bias = (torch::rand({d}) * 2 - 1).requires_grad_(true);
  state->dy = torch::rand({n, d}) * 2 - 1;
  state->target = torch::randint(d, {n}, torch::kLong);
  return [state] { state->run(); };
}

}  // namespace xtgrad::bench
