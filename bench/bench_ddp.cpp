// bench_ddp: data-parallel step time over MPI, launched as
//
//   OPENBLAS_NUM_THREADS=1 mpirun -np 2 build/release/bench/bench_ddp
//
// A stack of 4 pre-norm gated FFN blocks (PreNormResidual with a SwiGLU
// GatedFFN, d 512, hidden 1408), AdamW, a global batch of 4096 tokens. Each
// round times, in turn (interleaved, so that the machine's load changes hit
// every configuration alike; medians over rounds):
//   1 process   rank 0 alone on all 4096 tokens (the other ranks wait idle)
//   P local     every rank on its 4096 / P tokens, no gradient averaging (the floor)
//   P overlap   the same with GradientSynchronizer (all-reduce during backward)
//   P after     the same with overlap off (all-reduce after backward ends)
// and prints each median, the scaling efficiency (t1 / tP) / P (1 is
// ideal) and the load average. One OpenBLAS thread per rank.
//
// With --zero it compares instead, all on P ranks with overlap, data-parallel
// AdamW (every rank holds the whole optimizer state and steps every
// parameter) with ZeRO stage 1 and stage 2 (ShardedOptimizer): per
// configuration the median step time, the median time of the optimizer's
// step() alone, split for ZeRO into the shard's update (of which the
// wrapped AdamW's step() on the shard) and the all-gather
// (ShardedOptimizer::last_step; medians over ranks' maxima), the
// optimizer-state bytes per rank, and the gradient bytes a rank keeps in its
// Parameters after backward.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <xtensor/xview.hpp>
#include <xtgrad/distributed/distributed.hpp>
#include <xtgrad/engine/engine.hpp>
#include <xtgrad/modules/modules.hpp>
#include <xtgrad/optim/optim.hpp>

using namespace xtgrad;
using Clock = std::chrono::steady_clock;

namespace {

struct Config {
  std::size_t tokens = 4096, d = 512, hidden = 1408, blocks = 4;
  int rounds = 5;
};

std::unique_ptr<Sequential<float>> make_stack(const Config& c) {
  Generator g(1);
  PreNormResidualOptions o;
  o.ffn = FFNKind::gated;
  auto net = std::make_unique<Sequential<float>>();
  for (std::size_t b = 0; b < c.blocks; ++b)
    net->emplace_back<PreNormResidual<float>>(c.d, c.hidden, o, g);
  return net;
}

// One training step; seconds.
double step(Sequential<float>& net, optim::AdamW<float>& opt, Tape<float>& tape,
            const xt::xarray<float>& x, distributed::GradientSynchronizer<float>* sync) {
  const auto start = Clock::now();
  tape.clear();
  opt.zero_grad();
  tape.backward(mean(square(net(tape.leaf(x, false)))));
  if (sync) sync->finish();
  opt.step();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Waits at a barrier without spinning a core (MPI_Barrier polls).
void idle_barrier(const distributed::Communicator& comm) {
  MPI_Request request;
  distributed::detail::check_mpi(MPI_Ibarrier(comm.comm(), &request), "MPI_Ibarrier");
  for (int done = 0; !done;) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

void run(distributed::Communicator& comm, const Config& c) {
  const int P = comm.size(), r = comm.rank();
  if (c.tokens % static_cast<std::size_t>(P) != 0)
    throw std::invalid_argument("--tokens " + std::to_string(c.tokens) + " is not divisible by " +
                                std::to_string(P) + " processes");
  const std::size_t local = c.tokens / static_cast<std::size_t>(P);
  Generator g(2);
  const xt::xarray<float> x = xtgrad::detail::standard_normal<float>({c.tokens, c.d}, g);
  const xt::xarray<float> x_local = xt::view(x, xt::range(r * local, (r + 1) * local));

  // One model per configuration, so each keeps its own warm tape and state.
  auto alone = make_stack(c), floor = make_stack(c), overlap = make_stack(c), after = make_stack(c);
  optim::AdamW<float> opt_alone(alone->parameters()), opt_floor(floor->parameters()),
      opt_overlap(overlap->parameters()), opt_after(after->parameters());
  distributed::GradientSynchronizer<float> sync_overlap(comm, *overlap);
  distributed::GradientSynchronizer<float> sync_after(
      comm, *after, distributed::SynchronizerOptions().with_overlap(false));
  Tape<float> tape_alone, tape_floor, tape_overlap, tape_after;
  sync_overlap.attach(tape_overlap);
  sync_after.attach(tape_after);

  std::vector<double> t1, t_floor, t_overlap, t_after;
  const std::string load_before = load_average();
  for (int round = -1; round < c.rounds; ++round) {  // round -1 warms up
    idle_barrier(comm);
    if (r == 0) {
      const double t = step(*alone, opt_alone, tape_alone, x, nullptr);
      if (round >= 0) t1.push_back(t);
    }
    idle_barrier(comm);
    const double a = step(*floor, opt_floor, tape_floor, x_local, nullptr);
    idle_barrier(comm);
    const double b = step(*overlap, opt_overlap, tape_overlap, x_local, &sync_overlap);
    idle_barrier(comm);
    const double d = step(*after, opt_after, tape_after, x_local, &sync_after);
    // A step takes as long as its slowest rank.
    const std::vector<std::uint64_t> us = comm.all_gather(static_cast<std::uint64_t>(a * 1e6));
    const std::vector<std::uint64_t> vs = comm.all_gather(static_cast<std::uint64_t>(b * 1e6));
    const std::vector<std::uint64_t> ws = comm.all_gather(static_cast<std::uint64_t>(d * 1e6));
    if (round < 0) continue;
    t_floor.push_back(*std::max_element(us.begin(), us.end()) * 1e-6);
    t_overlap.push_back(*std::max_element(vs.begin(), vs.end()) * 1e-6);
    t_after.push_back(*std::max_element(ws.begin(), ws.end()) * 1e-6);
  }
  if (r != 0) return;
  std::size_t parameters = 0;
  for (const Parameter<float>* p : alone->parameters()) parameters += p->value.size();
  const double m1 = median(t1), mf = median(t_floor), mo = median(t_overlap), ma = median(t_after);
  std::printf(
      "ddp: %zu x PreNormResidual(gated, d %zu, hidden %zu), %zu parameters (%.1f MiB of "
      "gradients, %zu buckets), global batch %zu tokens, AdamW, float, %d rounds\n",
      c.blocks, c.d, c.hidden, parameters, parameters * 4.0 / (1 << 20),
      sync_overlap.buckets().size(), c.tokens, c.rounds);
  std::printf("%-34s %10s %12s\n", "configuration", "median s", "efficiency");
  std::printf("%-34s %10.3f %12s\n", "1 process, all tokens", m1, "1");
  std::printf("%-34s %10.3f %12.2f\n", (std::to_string(P) + " processes, no averaging").c_str(), mf,
              m1 / mf / P);
  std::printf("%-34s %10.3f %12.2f\n", (std::to_string(P) + " processes, overlap").c_str(), mo,
              m1 / mo / P);
  std::printf("%-34s %10.3f %12.2f\n", (std::to_string(P) + " processes, all-reduce after").c_str(),
              ma, m1 / ma / P);
  std::printf("efficiency = (t1 / tP) / P, 1 is ideal; load average before %s, after %s\n",
              load_before.c_str(), load_average().c_str());
}

// --zero: data-parallel vs ZeRO stages 1 and 2 (see the top).
struct ZeroTimes {
  std::vector<double> step, optimizer, update, shard, gather;
};

// The largest of the ranks' values (a step is as long as its slowest rank).
double slowest(const distributed::Communicator& comm, double seconds) {
  const auto all = comm.all_gather(static_cast<std::uint64_t>(seconds * 1e6));
  return *std::max_element(all.begin(), all.end()) * 1e-6;
}

void run_zero(distributed::Communicator& comm, const Config& c) {
  const int P = comm.size(), r = comm.rank();
  if (c.tokens % static_cast<std::size_t>(P) != 0)
    throw std::invalid_argument("--tokens " + std::to_string(c.tokens) + " is not divisible by " +
                                std::to_string(P) + " processes");
  const std::size_t local = c.tokens / static_cast<std::size_t>(P);
  Generator g(2);
  const xt::xarray<float> x = xtgrad::detail::standard_normal<float>({c.tokens, c.d}, g);
  const xt::xarray<float> x_local = xt::view(x, xt::range(r * local, (r + 1) * local));
  const char* names[] = {"data-parallel AdamW", "ZeRO stage 1", "ZeRO stage 2"};
  std::unique_ptr<Sequential<float>> nets[3];
  std::unique_ptr<distributed::GradientSynchronizer<float>> syncs[3];
  std::unique_ptr<optim::Optimizer<float>> opts[3];
  Tape<float> tapes[3];
  for (int k = 0; k < 3; ++k) {
    nets[k] = make_stack(c);
    syncs[k] = std::make_unique<distributed::GradientSynchronizer<float>>(comm, *nets[k]);
    syncs[k]->attach(tapes[k]);
    if (k == 0)
      opts[k] = std::make_unique<optim::AdamW<float>>(nets[k]->parameters());
    else
      opts[k] = std::make_unique<distributed::ShardedOptimizer<float>>(
          *syncs[k], optim::AdamWOptions(), distributed::ZeroOptions{k});
  }
  ZeroTimes times[3];
  std::size_t grad_bytes[3] = {0, 0, 0};
  for (int round = -1; round < c.rounds; ++round) {  // round -1 warms up
    for (int k = 0; k < 3; ++k) {
      idle_barrier(comm);
      const auto start = Clock::now();
      tapes[k].clear();
      opts[k]->zero_grad();
      tapes[k].backward(mean(square((*nets[k])(tapes[k].leaf(x_local, false)))));
      syncs[k]->finish();
      grad_bytes[k] = 0;
      for (const Parameter<float>* p : nets[k]->parameters())
        grad_bytes[k] += p->grad.size() * sizeof(float);
      const auto before_step = Clock::now();
      opts[k]->step();
      const auto end = Clock::now();
      const double total = slowest(comm, std::chrono::duration<double>(end - start).count());
      const double optimizer =
          slowest(comm, std::chrono::duration<double>(end - before_step).count());
      distributed::ZeroStepStats stats{optimizer, optimizer, 0.0};
      if (k > 0) stats = dynamic_cast<distributed::ShardedOptimizer<float>&>(*opts[k]).last_step();
      const double update = slowest(comm, stats.update_seconds);
      const double shard = slowest(comm, stats.optimizer_seconds);
      const double gather = slowest(comm, stats.all_gather_seconds);
      if (round < 0) continue;
      times[k].step.push_back(total);
      times[k].optimizer.push_back(optimizer);
      times[k].update.push_back(update);
      times[k].shard.push_back(shard);
      times[k].gather.push_back(gather);
    }
  }
  std::size_t state[3];
  for (int k = 0; k < 3; ++k) {
    std::size_t bytes = 0;
    if (k == 0)
      for (const auto& entry : opts[0]->state_dict().arrays) bytes += entry.second.size() * 4;
    else
      bytes = dynamic_cast<distributed::ShardedOptimizer<float>&>(*opts[k]).state_bytes();
    const auto all = comm.all_gather(bytes);
    state[k] = *std::max_element(all.begin(), all.end());
  }
  for (auto& sync : syncs) sync->detach();
  if (r != 0) return;
  std::size_t parameters = 0;
  for (const Parameter<float>* p : nets[0]->parameters()) parameters += p->value.size();
  std::printf(
      "zero: %d processes, %zu x PreNormResidual(gated, d %zu, hidden %zu), %zu parameters, "
      "global batch %zu tokens, AdamW, float, %d rounds (medians; a step as long as its slowest "
      "rank)\n",
      P, c.blocks, c.d, c.hidden, parameters, c.tokens, c.rounds);
  std::printf("%-20s %8s %12s %9s %9s %11s %20s %20s\n", "configuration", "step s", "optimizer s",
              "update s", "AdamW s", "all-gather s", "opt. state MiB/rank", "grads kept MiB/rank");
  for (int k = 0; k < 3; ++k)
    std::printf("%-20s %8.3f %12.4f %9.4f %9.4f %11.4f %20.2f %20.2f\n", names[k],
                median(times[k].step), median(times[k].optimizer), median(times[k].update),
                median(times[k].shard), median(times[k].gather), state[k] / 1048576.0,
                grad_bytes[k] / 1048576.0);
  std::printf("load average %s\n", load_average().c_str());
}

}  // namespace

int main(int argc, char** argv) {
  distributed::Communicator comm(argc, argv);
  Config c;
  CLI::App app{"Data-parallel step time over MPI (run under mpirun)"};
  app.add_option("--tokens", c.tokens, "global batch in tokens")->capture_default_str();
  app.add_option("--d", c.d, "model width")->capture_default_str();
  app.add_option("--hidden", c.hidden, "gated FFN hidden width")->capture_default_str();
  app.add_option("--blocks", c.blocks, "PreNormResidual blocks")->capture_default_str();
  app.add_option("--rounds", c.rounds, "timed rounds (medians)")->capture_default_str();
  bool zero = false;
  app.add_flag("--zero", zero, "compare data-parallel with ZeRO stages 1 and 2 instead");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (comm.rank() == 0) app.exit(e);
    return e.get_exit_code();
  }
  if (comm.rank() == 0) std::printf("bench_ddp: %s\n", compute_info().c_str());
  try {
    if (zero)
      run_zero(comm, c);
    else
      run(comm, c);
  } catch (const std::exception& e) {
    comm.abort(std::string("bench_ddp: ") + e.what());
  }
  return 0;
}
