// A rank that throws in the middle of a step: run by mpirun from
// ddp_abort.cmake, which expects the job to end at once with the error.
// Rank `failing` (argv[1]) throws from a backward rule at step 3, while the
// other ranks are inside the step's all-reduces; main turns the exception
// into Communicator::abort. argv[2] picks the optimizer and the failure:
// "ddp" (the default: SGD after the all-reduces), "zero" (ZeRO stage 2,
// the ranks inside reduce-scatters), "kill" (ZeRO stage 2, the rank
// killed by SIGKILL instead of throwing), "moe" (a SparseMoe with its
// experts sharded: the other ranks inside the backward's all-to-all).
#include <csignal>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>

#include <xtgrad/distributed/distributed.hpp>
#include <xtgrad/engine/engine.hpp>
#include <xtgrad/modules/modules.hpp>
#include <xtgrad/optim/optim.hpp>

using namespace xtgrad;

namespace {

// y = x, whose backward throws on `failing` at step `step` (an op of one's own).
Var<double> fail_in_backward(const Var<double>& x, bool fail) {
  Tape<double>& tape = x.tape();
  const std::size_t xi = x.index();
  const std::size_t yi = tape.record("fail_in_backward", {xi}, x.requires_grad());
  tape.value_mut(yi) = tape.value(xi);
  tape.set_backward(yi, [xi, fail](Tape<double>& t, const xt::xarray<double>& dy) {
    if (fail) throw std::runtime_error("injected failure in a backward rule");
    GradSlot<double> dx = t.grad_slot(xi);
    if (dx.accumulate)
      dx.buffer += dy;
    else
      dx.buffer = dy;
  });
  return tape.var(yi);
}

// Linear, SparseMoe (experts sharded), Linear; the failure between the two last.
void train_moe(distributed::Communicator& comm, int failing) {
  Generator g(1);
  Sequential<double> net;
  net.emplace_back<Linear<double>>(8, 8, true, g);
  SparseMoeOptions o;
  o.num_experts = 2 * static_cast<std::size_t>(comm.size());
  net.emplace_back<SparseMoe<double>>(8, 16, o, g);
  net.emplace_back<Linear<double>>(8, 8, true, g);
  distributed::shard_experts(comm, net);
  distributed::GradientSynchronizer<double> sync(comm, net);
  optim::SGD<double> opt(net.parameters(), optim::SGDOptions(0.1));
  Tape<double> tape;
  sync.attach(tape);
  const xt::xarray<double> x = xt::ones<double>({8, 8});
  for (int step = 0; step < 1000; ++step) {
    tape.clear();
    opt.zero_grad();
    const Var<double> h = net[1](net[0](tape.leaf(x, false)));
    const Var<double> y = net[2](fail_in_backward(h, step == 3 && comm.rank() == failing));
    tape.backward(sum(y));
    sync.finish();
    opt.step();
  }
  sync.detach();
}

void train(distributed::Communicator& comm, int failing, const std::string& mode) {
  if (mode == "moe") return train_moe(comm, failing);
  Generator g(1);
  Sequential<double> net;
  net.emplace_back<Linear<double>>(32, 32, true, g);
  net.emplace_back<Linear<double>>(32, 32, true, g);
  distributed::GradientSynchronizer<double> sync(
      comm, net, distributed::SynchronizerOptions().first_bucket(1).bucket(1));
  std::unique_ptr<optim::Optimizer<double>> opt;
  if (mode == "ddp")
    opt = std::make_unique<optim::SGD<double>>(net.parameters(), optim::SGDOptions(0.1));
  else
    opt = std::make_unique<distributed::ShardedOptimizer<double>>(sync, optim::AdamWOptions(1e-3),
                                                                  distributed::ZeroOptions{2});
  Tape<double> tape;
  sync.attach(tape);
  const xt::xarray<double> x = xt::ones<double>({8, 32});
  for (int step = 0; step < 1000; ++step) {
    tape.clear();
    opt->zero_grad();
    if (mode == "kill" && step == 3 && comm.rank() == failing) std::raise(SIGKILL);
    const Var<double> h = net[0](tape.leaf(x, false));
    const Var<double> y =
        net[1](fail_in_backward(h, mode != "kill" && step == 3 && comm.rank() == failing));
    tape.backward(sum(y));
    sync.finish();
    opt->step();
  }
  sync.detach();
}

}  // namespace

int main(int argc, char** argv) {
  distributed::Communicator comm(argc, argv);
  const int failing = argc > 1 ? std::atoi(argv[1]) : 1;
  const std::string mode = argc > 2 ? argv[2] : "ddp";
  try {
    train(comm, failing, mode);
  } catch (const std::exception& e) {
    comm.abort(std::string("step failed: ") + e.what());
  }
  return 0;
}
