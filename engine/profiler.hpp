#pragma once
// Profiler: where the time of a training step goes, op by op, like
// torch.autograd.profiler's key_averages().
//
//   Profiler profiler;
//   {
//     ProfilerGuard<float> guard(tape, profiler);  // or tape.set_profiler(&profiler)
//     ProfileStep step(profiler);                  // optional: the step's wall time
//     Var<float> loss = ...;                       // every op's forward is timed
//     tape.backward(loss);                         // and every backward rule
//     ProfileRegion region(profiler, "optimizer.step");  // any named scope too
//     optimizer.step();
//   }
//   std::cout << profiler.table();  // also csv() and json()
//
// What is measured:
//  * the forward of an op, from Tape::record to Tape::set_backward (the
//    computation of its value; argument checks before record are not in it),
//    a row named after the op ("linear"); leaf and param are rows too (the
//    copy of a leaf's value);
//  * the backward rule of a node, a row "<op>.backward" ("linear.backward");
//  * a ProfileRegion, a row with its own name.
// Self time excludes what is timed inside (an op recorded inside another op,
// the ops inside a region); total time includes it. Self times never
// overlap, so their sum is the time spent in timed code; with steps marked,
// the rest of the steps' wall time is the row "[outside ops]" and a row's
// share is its self time over the steps' wall time (otherwise over the sum
// of self times).
//
// Costs, from the nodes' shapes (Profiler::cost_model states the model):
// FLOPs for the GEMM ops (linear, matmul, activation_linear, gated_linear:
// 2 M N K per GEMM, as torch.profiler's with_flops counts them) and the
// fused attention ops (as torch.utils.flop_counter counts sdpa), bytes for
// the elementwise ops (every operand read once, the result written once).
//
// One Profiler serves one thread at a time (it may watch several tapes of
// that thread). It knows ops by the address of their name (Tape::record's
// `op`, a literal), so an op name must outlive the profiler too. Off (no
// profiler set on the tape) it costs one branch per node.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "profile_row.hpp"
#include "profiler_cost.hpp"

namespace xtgrad {

// The columns a profile can be sorted by: descending, except name (ascending).
enum class ProfileColumn { name, calls, self, total, average, share, flops, gflops, bytes, gbytes };

// "name", "calls", "self", "total", "average", "share", "flops", "gflops",
// "bytes", "gbytes" (std::invalid_argument for anything else).
ProfileColumn parse_profile_column(std::string_view name);

class Profiler {
 public:
  Profiler() = default;
  Profiler(const Profiler&) = delete;  // tapes hold a pointer to it
  Profiler& operator=(const Profiler&) = delete;

  // Forget every row and step (what is being timed right now is dropped too).
  void reset();

  // Mark a step (or use ProfileStep): steps' wall time is the base of the
  // share column and of the row "[outside ops]". Steps must not nest.
  void begin_step();
  void end_step();
  std::size_t steps() const { return steps_; }
  double step_seconds() const { return step_seconds_; }
  // The sum of all self times: the time spent in timed code.
  double self_seconds() const;

  // The rows, sorted by `by`; with steps marked, "[outside ops]" is among them.
  std::vector<ProfileRow> rows(ProfileColumn by = ProfileColumn::self) const;
  // key_averages().table(): a fixed-width table of the first `limit` rows
  // (0: all) and a summary line.
  std::string table(ProfileColumn by = ProfileColumn::self, std::size_t limit = 0) const;
  // Every row, one per line, with a header; times in seconds.
  std::string csv(ProfileColumn by = ProfileColumn::self) const;
  // {"steps", "step_seconds", "self_seconds", "rows": [...]}, times in seconds.
  std::string json(ProfileColumn by = ProfileColumn::self) const;

  // ---- Called by Tape (tape.cpp) and ProfileRegion ----
  template <class T>
  void forward_begin(const Tape<T>& tape, std::size_t index);
  template <class T>
  void forward_end(const Tape<T>& tape, std::size_t index);
  template <class T>
  void backward_begin(const Tape<T>& tape, std::size_t index);
  template <class T>
  void backward_end(const Tape<T>& tape, std::size_t index);
  void region_begin(const char* name);  // `name` must outlive the region
  void region_end();

  // The cost model: FLOPs (GEMM, attention) and bytes (elementwise ops) of node
  // `index` of `tape`, forward or backward, from its and its parents' shapes.
  using Cost = ProfileCost;
  template <class T>
  static Cost cost_model(const Tape<T>& tape, std::size_t index, bool backward);

 private:
  using Clock = std::chrono::steady_clock;
  using CostClass = detail::CostClass;

  struct Totals {
    std::string name;
    ProfileRow::Kind kind;
    CostClass cost_class = CostClass::none;
    std::size_t calls = 0;
    std::int64_t self_ns = 0, total_ns = 0;
    double flops = 0, bytes = 0;
  };
  // What is being timed: an op's forward, a backward rule or a region.
  struct Open {
    const void* owner;  // the tape, or null for a region
    std::size_t index;  // the node (0 for a region)
    const char* name;
    ProfileRow::Kind kind;
    Clock::time_point start;
    std::int64_t inner_ns = 0;  // total time of what was timed inside
  };

  void open(const void* owner, std::size_t index, const char* name, ProfileRow::Kind kind);
  // Ends the timing of (owner, index, kind); its row, or null if it was not open.
  Totals* close(const void* owner, std::size_t index, ProfileRow::Kind kind);
  Totals& totals_for(const char* name, ProfileRow::Kind kind);

  struct KeyHash {
    std::size_t operator()(const std::pair<const char*, ProfileRow::Kind>& key) const {
      return std::hash<const char*>()(key.first) ^ (std::size_t(key.second) << 1);
    }
  };

  std::vector<Open> open_;
  std::vector<Totals> totals_;
  // Rows by (name pointer, kind), a fast path for op literals, and by
  // (kind, name text), so that equal names from different literals share a row.
  std::unordered_map<std::pair<const char*, ProfileRow::Kind>, std::size_t, KeyHash> by_pointer_;
  std::unordered_map<std::string, std::size_t> by_text_;
  std::size_t steps_ = 0;
  double step_seconds_ = 0;
  bool in_step_ = false;
  Clock::time_point step_start_;
};

// Sets a tape's profiler for a scope, restoring the previous one at exit.
template <class T>
class ProfilerGuard {
 public:
  ProfilerGuard(Tape<T>& tape, Profiler& profiler);
  ~ProfilerGuard();
  ProfilerGuard(const ProfilerGuard&) = delete;
  ProfilerGuard& operator=(const ProfilerGuard&) = delete;

 private:
  Tape<T>& tape_;
  Profiler* previous_;
};

// Times a named scope (an optimizer step, a data load) as a row; regions of
// the same name share a row. `name` must live until the region ends.
class ProfileRegion {
 public:
  ProfileRegion(Profiler& profiler, const char* name) : profiler_(profiler) {
    profiler_.region_begin(name);
  }
  ~ProfileRegion() { profiler_.region_end(); }
  ProfileRegion(const ProfileRegion&) = delete;
  ProfileRegion& operator=(const ProfileRegion&) = delete;

 private:
  Profiler& profiler_;
};

// Marks one step for a scope (Profiler::begin_step / end_step).
class ProfileStep {
 public:
  explicit ProfileStep(Profiler& profiler) : profiler_(profiler) { profiler_.begin_step(); }
  ~ProfileStep() { profiler_.end_step(); }
  ProfileStep(const ProfileStep&) = delete;
  ProfileStep& operator=(const ProfileStep&) = delete;

 private:
  Profiler& profiler_;
};

#define XTGRAD_PROFILER_EXTERN(T)                                                         \
  extern template void Profiler::forward_begin(const Tape<T>&, std::size_t);              \
  extern template void Profiler::forward_end(const Tape<T>&, std::size_t);                \
  extern template void Profiler::backward_begin(const Tape<T>&, std::size_t);             \
  extern template void Profiler::backward_end(const Tape<T>&, std::size_t);               \
  extern template Profiler::Cost Profiler::cost_model(const Tape<T>&, std::size_t, bool); \
  extern template class ProfilerGuard<T>;
XTGRAD_PROFILER_EXTERN(float)
XTGRAD_PROFILER_EXTERN(double)
#undef XTGRAD_PROFILER_EXTERN

}  // namespace xtgrad
