#pragma once
// BackwardObserver<T>: a watcher of a Tape's reverse passes, added with
// Tape::add_backward_observer.

#include <cstddef>

namespace xtgrad {

template <class T>
class Tape;

// Watches reverse passes (distributed/'s gradient synchronizer is one). While
// an observer is added, backward(y) calls, in this order:
//   backward_begin(tape, root)  once, before any backward rule runs (root is
//                               y's node index; the recording is complete);
//   node_done(tape, i)          for every position i = root, root - 1, ..., 0
//                               of the reverse walk, right after node i's rule
//                               ran (or was skipped: no rule, or no gradient
//                               reached it);
//   backward_end(tape)          after node_done(tape, 0).
// Since the walk is in reverse recording order, once node_done(i) returns no
// rule of a node >= i runs again in this pass: a Parameter whose earliest
// reader (the smallest node index having its param node as a parent) is i has
// its final gradient of the pass at node_done(i). An observer may throw from
// backward_begin (nothing has been written yet). A rule that throws ends the
// pass without backward_end. An observer must be removed before it is
// destroyed; a tape destroyed first tells its observers (tape_destroyed).
template <class T>
class BackwardObserver {
 public:
  virtual ~BackwardObserver() = default;
  virtual void backward_begin(const Tape<T>& tape, std::size_t root) = 0;
  virtual void node_done(const Tape<T>& tape, std::size_t index) = 0;
  virtual void backward_end(const Tape<T>& tape) = 0;
  virtual void tape_destroyed(const Tape<T>&) {}
};

}  // namespace xtgrad
