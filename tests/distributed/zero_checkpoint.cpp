// A consolidated ZeRO checkpoint moves between numbers of ranks: run by
// mpirun from tests/distributed/CMakeLists.txt, first
//   zero_checkpoint save DIR   (2 ranks: 25 steps of ZeRO stage 2, the
//                               consolidated state saved by rank 0)
// then
//   zero_checkpoint load DIR   (3 ranks: ZeRO stage 1; 1 rank: plain AdamW)
// which loads it, runs the remaining 25 steps and compares with 50
// uninterrupted steps of one process (<= 1e-12 relative, every rank).
// Exit code 0 when every rank agrees. A program, not doctest cases (the
// shared helpers' doctest parts are compiled out).
#define DOCTEST_CONFIG_DISABLE
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include <xtgrad/io/state_directory.hpp>

#include "zero_training.hpp"

using namespace xtgrad;
using namespace xtgrad::testing::zero;

namespace {

constexpr int k_steps = 50, k_first = 25;

// The entries of `state` under "<prefix>.", with the prefix taken off.
StateDict<double> part(const StateDict<double>& state, const std::string& prefix) {
  StateDict<double> out;
  const std::string p = prefix + ".";
  for (const auto& [k, v] : state.arrays)
    if (k.compare(0, p.size(), p) == 0) out.arrays[k.substr(p.size())] = v;
  for (const auto& [k, v] : state.integers)
    if (k.compare(0, p.size(), p) == 0) out.integers[k.substr(p.size())] = v;
  for (const auto& [k, v] : state.reals)
    if (k.compare(0, p.size(), p) == 0) out.reals[k.substr(p.size())] = v;
  for (const auto& [k, v] : state.strings)
    if (k.compare(0, p.size(), p) == 0) out.strings[k.substr(p.size())] = v;
  return out;
}

void add(StateDict<double>& out, const StateDict<double>& state, const std::string& prefix) {
  for (const auto& [k, v] : state.arrays) out.arrays[prefix + "." + k] = v;
  for (const auto& [k, v] : state.integers) out.integers[prefix + "." + k] = v;
  for (const auto& [k, v] : state.reals) out.reals[prefix + "." + k] = v;
  for (const auto& [k, v] : state.strings) out.strings[prefix + "." + k] = v;
}

void save(distributed::Communicator& comm, const std::string& dir) {
  Run<double> run(Mode::zero2, &comm);
  run.steps(k_first);
  const StateDict<double> optimizer = run.sharded().consolidated_state_dict();
  if (comm.rank() != 0) return;
  StateDict<double> out;
  for (const auto& [name, p] : run.model->named_parameters())
    out.arrays["model." + name] = p->value;
  add(out, optimizer, "optimizer");
  add(out, run.schedule->state_dict(), "scheduler");
  save_state_directory(dir, out);
}

// Returns the relative error against the uninterrupted run.
double load(distributed::Communicator& comm, const std::string& dir) {
  const StateDict<double> in = load_state_directory<double>(dir, std::size_t{1} << 24);
  Run<double> straight(Mode::one_process, nullptr);
  straight.steps(k_steps);
  Run<double> run(comm.size() == 1 ? Mode::one_process : Mode::zero1, &comm);
  for (const auto& [name, p] : run.model->named_parameters())
    p->value = in.arrays.at("model." + name);
  if (comm.size() == 1)
    run.opt->load_state_dict(part(in, "optimizer"));
  else
    run.sharded().load_consolidated_state_dict(part(in, "optimizer"));
  run.schedule->load_state_dict(part(in, "scheduler"));
  run.steps(k_steps - k_first);
  return testing::parameters_relative_error(*run.model, *straight.model);
}

}  // namespace

int main(int argc, char** argv) {
  distributed::Communicator comm(argc, argv);
  if (argc != 3 || (std::strcmp(argv[1], "save") != 0 && std::strcmp(argv[1], "load") != 0))
    comm.abort("usage: zero_checkpoint save|load DIR");
  int failed = 0;
  try {
    if (std::strcmp(argv[1], "save") == 0) {
      save(comm, argv[2]);
    } else {
      const double error = load(comm, argv[2]);
      std::printf("rank %d of %d: relative error after resuming %g\n", comm.rank(), comm.size(),
                  error);
      failed = error <= 1e-12 ? 0 : 1;
    }
  } catch (const std::exception& e) {
    comm.abort(e.what());
  }
  return comm.all_reduce_sum(failed) > 0 ? 1 : 0;
}
