#pragma once
// What the C++ fragments of README.md and docs/*.md use without defining it
// (tests/docs/snippets.cmake): every public header, and one namespace per
// context, named in a block's <!-- snippet: CONTEXT --> line, declaring the
// names its fragments take as given (the data, a model, a tape).
// Declarations only: the fragments are compiled, never linked or run.

#include <cstddef>
#include <cstdint>
#include <exception>
#include <iostream>
#include <vector>

#include <xtensor/xarray.hpp>
#include <xtgrad/data/data.hpp>
#include <xtgrad/engine/engine.hpp>
#include <xtgrad/io/io.hpp>
#include <xtgrad/modules/modules.hpp>
#include <xtgrad/optim/optim.hpp>
#include <xtgrad/training/training_state.hpp>
#if XTGRAD_HAVE_MPI
#include <xtgrad/distributed/distributed.hpp>
#endif

namespace docs_context {
using namespace xtgrad;

// Fragments that define everything they use.
namespace none {}

// A training step of a feed-forward module (docs/modules.md).
namespace ffn_step {
extern xt::xarray<float> batch, target;  // [..., 512]
}

// The functional forms (docs/modules.md).
namespace functional {
extern Var<double> x, w1, b1, w2, b2, weight1, bias1, weight2, bias2, w_up, w_gate, w_down;
}

// A GPT and its tokens (docs/modules.md).
namespace gpt {
extern Generator generator;
extern Indices tokens;  // [B, T]
}  // namespace gpt

// Serving: an input array (docs/modules.md).
namespace inference {
extern xt::xarray<float> x;  // [..., 512]
}

// The training step of demos/fit_pde.cpp (docs/higher_order_gradients.md).
namespace pde {
extern Tape<double> tape;
extern Var<double> x, y;         // collocation points [48, 1], the network's output
extern xt::xarray<double> ones;  // x's shape
}  // namespace pde

// A data set in memory (docs/training.md).
namespace data_set {
extern xt::xarray<float> images;  // [N, 784]
extern Indices labels;            // [N]
extern std::uint64_t epoch;
}  // namespace data_set

// The training loop of the README's example (demos/first_model.cpp).
namespace training_loop {
extern Mlp<float> model;
extern optim::AdamW<float> optimizer;
extern Tape<float> tape;
extern xt::xarray<float> x, y;  // [256, 1]
}  // namespace training_loop

#if XTGRAD_HAVE_MPI
// A data-parallel program's main (docs/distributed.md).
namespace distributed_main {
extern int argc;
extern char** argv;
extern std::uint64_t seed, epoch;
extern std::size_t n;             // rows in the data set
extern xt::xarray<float> inputs;  // [n, 512]
extern xt::xarray<float> x, y;    // this rank's rows of a batch and their targets
}  // namespace distributed_main

// The loop of docs/distributed.md with a ShardedOptimizer.
namespace distributed_zero {
extern distributed::Communicator comm;
extern GatedFFN<float> model;
extern std::vector<Parameter<float>*> matrices, vectors;  // the weight matrices, the rest
extern std::int64_t steps;
extern Tape<float> tape;
extern Var<float> loss;
}  // namespace distributed_zero

// Expert parallelism in docs/distributed.md.
namespace distributed_expert {
extern distributed::Communicator comm;
extern std::uint64_t seed;
extern Tape<float> tape;
extern xt::xarray<float> x, y;  // this rank's rows [b, 512] and targets
}  // namespace distributed_expert
#endif

}  // namespace docs_context
