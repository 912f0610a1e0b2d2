#pragma once
// recompute(fn, inputs): activation recomputation ("activation
// checkpointing"), the semantics of torch.utils.checkpoint.checkpoint (Chen
// et al. 2016, "Training Deep Nets with Sublinear Memory Cost") on a tape.
// (Saving a model's weights is io/checkpoint.hpp; this file trades compute
// for activation memory.)
//
//   outputs = fn(inputs)
//
// Forward: fn runs once on a private tape that does not record, so none of
// its intermediate values is kept for backward; only the outputs are.
// Backward: fn runs again on a private recording tape, from the saved
// inputs, its recording is walked back from the outputs' gradients, and the
// inputs' gradients are added to their nodes (Tape::grad_slot's
// write-or-accumulate rule). Memory: a chain of k recomputed blocks keeps
// only the blocks' inputs and outputs, plus one block's intermediates while
// its forward or backward runs; time: one more forward per block.
//
// What is recorded on the tape of the inputs:
//   * one "param" node for each Parameter that fn recorded with tape.param
//     (in order of first use), so that the recording says which Parameters
//     the recompute reads: a BackwardObserver (the gradient synchronizer of
//     distributed/) sees the recompute as a reader of each, and takes their
//     gradients as final after the recompute's backward ran;
//   * one "recompute" node, value of shape [0], whose parents are the inputs
//     and then those "param" nodes, and whose backward rule is the re-run;
//   * one "recompute_output" node per output of fn, parent the "recompute"
//     node, holding the output's value. An output's rule only notes that its
//     gradient arrived; the "recompute" node, recorded before every output,
//     runs after all of them, so fn re-runs once per backward pass whatever
//     the number of outputs, and reads each output's gradient where it is.
//
// Gradients: a Parameter's gradient accumulates straight into Parameter::grad
// from the re-run's own "param" nodes, in the order the reverse pass would
// have added it without recomputation. An input's private leaf starts from
// the gradient its node already holds (the uses recorded after the
// recompute, or earlier backward passes into a leaf: Tape::node_has_grad),
// fn's uses are added onto it, and the total replaces the node's gradient:
// the order of the plain recording again. So the gradients are those of the
// same computation without recompute, bit for bit (except for an input given
// twice, or an input that is a Parameter's node which fn also reads through
// tape.param: their shares are summed at the end). An input that needs no
// gradient gets none; outputs that no gradient reached are not
// back-propagated. Backward may run any number of times over one recording:
// each pass re-runs fn.
//
// The rule for fn: a function of its inputs and of the Parameters it reads,
// called twice. It must record everything on the tape of the Vars it is given
// (an op mixing them with Vars of another tape throws std::logic_error) and
// return Vars of that tape; it must compute the same values both times. State
// that fn advances per call must be rewound by fn itself for the second call:
// a training Dropout module advances its step (its mask key) at every forward,
// so modules are recomputed through recompute_modules
// (modules/recompute_modules.hpp), which restores their steps for the
// re-run. This is enforced: the re-run's outputs are compared with the kept
// ones, bit for bit (one pass over the outputs, no extra memory), and a
// different count, shape or value, or a Parameter the first run did not read,
// throws std::logic_error naming recompute before any gradient is written.
// A Parameter whose value changes between the forward and the backward (an
// optimizer step) is caught the same way.
//
// Recording off (NoGradGuard, Module::infer): fn simply runs on the tape of
// the inputs, and its outputs are returned. Anomaly mode carries over to the
// private tapes; a Profiler times the whole recompute as its node's forward
// and backward (the private tapes are not profiled). Nested recomputes work:
// an inner recompute runs plainly during the outer first run (recording is
// off there) and is recorded as a recompute on the outer re-run's tape.
//
// Buffers: the private tapes are kept per thread, cleared, for the next
// recompute to record into without allocating (as a warm Tape reuses its
// buffers); between steps they hold the intermediates of the largest fn run
// on the thread (times the nesting depth). release_recompute_tapes<T>()
// frees them.
//
// Errors: std::invalid_argument for an empty fn or no inputs;
// std::logic_error for inputs of different tapes or stale handles, and for an
// fn that returns no outputs or a Var of another tape (nothing is recorded).
//
//   Var<double> y = recompute<double>([&](const Var<double>& h) { return block(h); }, x);
//   std::vector<Var<double>> ys = recompute<double>(
//       [&](const std::vector<Var<double>>& in) { return std::vector{in[0] * in[1], in[1]}; },
//       {a, b});

#include <functional>
#include <initializer_list>
#include <vector>

#include "tape.hpp"

namespace xtgrad {

// fn of recompute: the input Vars (on a private tape) -> the output Vars.
template <class T>
using RecomputeFn = std::function<std::vector<Var<T>>(const std::vector<Var<T>>&)>;

// Several inputs, several outputs (one or more of each).
template <class T>
std::vector<Var<T>> recompute(const RecomputeFn<NoDeduce<T>>& fn,
                              const std::vector<Var<T>>& inputs);
template <class T>
std::vector<Var<T>> recompute(const RecomputeFn<NoDeduce<T>>& fn,
                              std::initializer_list<Var<T>> inputs) {
  return recompute<T>(fn, std::vector<Var<T>>(inputs));
}

// One input, one output.
template <class T>
Var<T> recompute(const std::function<Var<NoDeduce<T>>(const Var<NoDeduce<T>>&)>& fn,
                 const Var<T>& x);

// Frees the private tapes the calling thread keeps for recompute<T> (see
// "Buffers" above); the next recompute allocates again.
template <class T>
void release_recompute_tapes();

extern template void release_recompute_tapes<float>();
extern template void release_recompute_tapes<double>();
extern template std::vector<Var<float>> recompute(const RecomputeFn<float>&,
                                                  const std::vector<Var<float>>&);
extern template std::vector<Var<double>> recompute(const RecomputeFn<double>&,
                                                   const std::vector<Var<double>>&);
extern template Var<float> recompute(const std::function<Var<float>(const Var<float>&)>&,
                                     const Var<float>&);
extern template Var<double> recompute(const std::function<Var<double>(const Var<double>&)>&,
                                      const Var<double>&);

}  // namespace xtgrad
