#pragma once
// Scopes that switch a Tape's (engine/tape.hpp) recording modes and restore
// the previous state at exit: NoGradGuard (recording off) and
// DetectAnomalyGuard (anomaly mode). Included by tape.hpp.

namespace xtgrad {

template <class T>
class Tape;

// Turns recording off for a scope (like torch::NoGradGuard), restoring the
// previous state at exit.
template <class T>
class NoGradGuard {
 public:
  explicit NoGradGuard(Tape<T>& tape) : tape_(tape), previous_(tape.grad_enabled()) {
    tape_.set_grad_enabled(false);
  }
  ~NoGradGuard() { tape_.set_grad_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  Tape<T>& tape_;
  bool previous_;
};

// Turns anomaly mode on for a scope (like torch.autograd.detect_anomaly),
// restoring the previous state at exit.
template <class T>
class DetectAnomalyGuard {
 public:
  explicit DetectAnomalyGuard(Tape<T>& tape, bool enabled = true)
      : tape_(tape), previous_(tape.detect_anomaly()) {
    tape_.set_detect_anomaly(enabled);
  }
  ~DetectAnomalyGuard() { tape_.set_detect_anomaly(previous_); }
  DetectAnomalyGuard(const DetectAnomalyGuard&) = delete;
  DetectAnomalyGuard& operator=(const DetectAnomalyGuard&) = delete;

 private:
  Tape<T>& tape_;
  bool previous_;
};

}  // namespace xtgrad
