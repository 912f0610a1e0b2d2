#pragma once
// training::StepObserver: seeing what a training loop's tape did. With
// options.graph it writes the picture of the first training step (to_dot +
// write_graph); with options.profile it times the last profile_steps steps
// per op (Profiler) and prints the table (the demos' --graph and --profile).
//
//   StepObserverOptions observe;                        // filled from a command line
//   StepObserver<T> observer(observe, steps);
//   for (step = 1 ... steps) {
//     auto profiled = observer.step(tape, step);        // profiles the last steps
//     loss = ...; tape.backward(loss);
//     observer.graph(tape, {loss}, model.named_parameters(), step);
//     observer.region("optimizer.step", [&] { optimizer.step(); });
//   }
//   observer.report(std::cout);
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "../engine/engine.hpp"

namespace xtgrad::training {

struct StepObserverOptions {
  std::string graph;  // a .svg, .png, .pdf or .dot path; empty: no picture
  bool profile = false;
  std::size_t profile_steps = 100;
  std::string profile_sort = "self";
  std::string profile_csv, profile_json;
};

template <class T>
class StepObserver {
 public:
  StepObserver(StepObserverOptions options, std::size_t steps)
      : o_(std::move(options)), steps_(steps) {}

  // Profiling of one step (`step` counts from 1): on for the last
  // profile_steps steps with --profile, otherwise nothing.
  class Step {
   public:
    Step(Tape<T>& tape, Profiler& profiler, bool on) {
      if (!on) return;
      guard_.emplace(tape, profiler);
      timed_.emplace(profiler);
    }

   private:
    std::optional<ProfilerGuard<T>> guard_;  // destroyed after timed_: the step ends first
    std::optional<ProfileStep> timed_;
  };
  Step step(Tape<T>& tape, std::size_t step) {
    profiling_ = o_.profile && step + o_.profile_steps > steps_;
    return Step(tape, profiler_, profiling_);
  }

  // Runs f, timed as the row `name` while the step is profiled.
  template <class F>
  void region(const char* name, F&& f) {
    std::optional<ProfileRegion> timed;
    if (profiling_) timed.emplace(profiler_, name);
    f();
  }

  // With --graph, writes the part of the tape leading to `outputs` once, at step 1.
  void graph(const Tape<T>& tape, const std::vector<Var<T>>& outputs,
             const ParameterNames<T>& names, std::size_t step) {
    if (o_.graph.empty() || step != 1) return;
    try {
      write_graph(to_dot(tape, outputs, names), o_.graph);
      std::cout << "wrote " << o_.graph << " (" << tape.size() << " tape nodes)\n";
    } catch (const std::runtime_error& e) {  // no Graphviz: say so, keep training
      std::cerr << e.what() << "\n";
    }
  }

  // With --profile, prints the table (and writes the CSV and JSON asked for).
  void report(std::ostream& out) const {
    if (!o_.profile) return;
    const ProfileColumn by = parse_profile_column(o_.profile_sort);
    out << "\nProfile of the last " << profiler_.steps() << " training steps (sorted by "
        << o_.profile_sort << "):\n"
        << profiler_.table(by);
    if (!o_.profile_csv.empty()) std::ofstream(o_.profile_csv) << profiler_.csv(by);
    if (!o_.profile_json.empty()) std::ofstream(o_.profile_json) << profiler_.json(by);
  }

  const Profiler& profiler() const { return profiler_; }

 private:
  StepObserverOptions o_;
  std::size_t steps_;
  Profiler profiler_;
  bool profiling_ = false;
};

}  // namespace xtgrad::training
