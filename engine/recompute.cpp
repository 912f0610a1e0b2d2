#include "recompute.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "errors.hpp"

namespace xtgrad {

namespace {

constexpr const char* k_op = "recompute";

// What the "recompute" node and its "recompute_output" nodes share: fn, the
// nodes of the recording (indices into the tape of the inputs), and which
// outputs received a gradient in the current backward pass.
template <class T>
struct Recording {
  RecomputeFn<T> fn;
  std::vector<std::size_t> inputs;              // the inputs' nodes, in fn's order
  std::vector<std::size_t> outputs;             // the "recompute_output" nodes
  std::vector<const Parameter<T>*> parameters;  // read by the first run, in order of first use
  std::vector<char> reached;                    // per output, this pass
};

// A private tape taken from this thread's free list and given back cleared:
// Tape::clear keeps a tape's node buffers, so the next recompute's run
// records into them without allocating (or having the kernel zero fresh
// pages), as a training loop's warm tape does. One tape per run in flight
// (two when recomputes nest); between runs they hold the buffers of the
// largest fn run on this thread (release_recompute_tapes frees them).
template <class T>
class PrivateTape {
 public:
  PrivateTape(bool grad_enabled, bool detect_anomaly) {
    std::vector<std::unique_ptr<Tape<T>>>& tapes = free_tapes();
    if (tapes.empty()) {
      tape_ = std::make_unique<Tape<T>>();
    } else {
      tape_ = std::move(tapes.back());
      tapes.pop_back();
    }
    tape_->set_grad_enabled(grad_enabled);
    tape_->set_detect_anomaly(detect_anomaly);
  }
  ~PrivateTape() {
    tape_->clear();  // Vars that fn kept of it become stale: using one throws
    try {
      free_tapes().push_back(std::move(tape_));
    } catch (...) {  // no memory for the list: the tape is freed instead
    }
  }
  PrivateTape(const PrivateTape&) = delete;
  PrivateTape& operator=(const PrivateTape&) = delete;
  Tape<T>& operator*() { return *tape_; }

  static std::vector<std::unique_ptr<Tape<T>>>& free_tapes() {
    thread_local std::vector<std::unique_ptr<Tape<T>>> tapes;
    return tapes;
  }

 private:
  std::unique_ptr<Tape<T>> tape_;
};

// The Parameters recorded on `tape` (tape.param), each once, in order of first use.
template <class T>
std::vector<const Parameter<T>*> parameters_read(const Tape<T>& tape) {
  std::vector<const Parameter<T>*> out;
  for (std::size_t i = 0; i < tape.size(); ++i)
    if (const Parameter<T>* p = tape.node_param(i))
      if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  return out;
}

// fn's outputs must be Vars of `tape` (the private one fn was given).
template <class T>
void check_outputs(const Tape<T>& tape, const std::vector<Var<T>>& outputs,
                   const std::string& when) {
  if (outputs.empty())
    detail::fail_logic(k_op, "fn returned no outputs " + when + "; return at least one Var");
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    const std::string arg = "output " + std::to_string(k) + " of fn";
    if (&outputs[k].tape_for(k_op, arg.c_str()) != &tape)  // an empty or stale handle throws here
      detail::fail_logic(k_op, arg + " is a Var of another tape " + when +
                                   "; fn must return Vars computed from the Vars it is given "
                                   "(pass a Var from outside fn as one of the inputs)");
  }
}

[[noreturn]] void fail_rerun(const std::string& what) {
  detail::fail_logic(k_op, "the re-run of fn in backward " + what +
                               "; fn must compute the same values from the same inputs (a "
                               "Dropout module must re-run with the step of its forward: "
                               "recompute modules with recompute_modules), and Parameters must "
                               "not change between the forward and the backward");
}

// Throws unless the re-run reproduced the kept outputs, bit for bit, and read
// no Parameter the first run did not.
template <class T>
void check_rerun(Tape<T>& outer, const Recording<T>& rec, const Tape<T>& rerun,
                 const std::vector<Var<T>>& outputs) {
  if (outputs.size() != rec.outputs.size())
    fail_rerun("returned " + std::to_string(outputs.size()) + " outputs, the forward " +
               std::to_string(rec.outputs.size()));
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    const xt::xarray<T>& now = outputs[k].value();
    const xt::xarray<T>& kept = outer.value(rec.outputs[k]);
    if (now.shape() != kept.shape())
      fail_rerun("gave output " + std::to_string(k) + " the shape " +
                 detail::shape_str(now.shape()) + ", the forward " +
                 detail::shape_str(kept.shape()));
    if (now.size() != 0 && std::memcmp(now.data(), kept.data(), now.size() * sizeof(T)) != 0) {
      std::size_t i = 0;
      while (std::memcmp(now.data() + i, kept.data() + i, sizeof(T)) == 0) ++i;
      fail_rerun("gave output " + std::to_string(k) + " different values (flat element " +
                 std::to_string(i) + ": " + detail::number_str(now.data()[i]) + ", the forward " +
                 detail::number_str(kept.data()[i]) + ")");
    }
  }
  for (const Parameter<T>* p : parameters_read(rerun))
    if (std::find(rec.parameters.begin(), rec.parameters.end(), p) == rec.parameters.end())
      fail_rerun("read Parameter " + detail::quoted(p->name) + ", which the forward did not");
}

// The outputs of the re-run that a gradient reached and that depend on
// something needing one, as indices k into the outputs.
template <class T>
std::vector<std::size_t> seeded_outputs(const Recording<T>& rec,
                                        const std::vector<Var<T>>& outputs) {
  std::vector<std::size_t> seeded;
  for (std::size_t k = 0; k < outputs.size(); ++k)
    if (rec.reached[k] && outputs[k].requires_grad()) seeded.push_back(k);
  return seeded;
}

// One node reading every seeded output, whose rule writes each output's
// gradient (d out_k = the gradient of "recompute_output" k on the outer
// tape), so that one reverse pass serves all outputs. Returns its index.
template <class T>
std::size_t record_seed(Tape<T>& tape, Tape<T>& outer, const Recording<T>& rec,
                        const std::vector<Var<T>>& outputs, std::vector<std::size_t> seeded) {
  std::vector<std::size_t> parents;
  for (const std::size_t k : seeded) parents.push_back(outputs[k].index());
  const std::size_t root = tape.record("recompute_seed", parents, true);
  tape.value_mut(root).resize(Shape{0});
  Tape<T>* outer_tape = &outer;
  const Recording<T>* recording = &rec;  // both outlive this private tape
  tape.set_backward(
      root, [outer_tape, recording, seeded, parents](Tape<T>& t, const xt::xarray<T>&) {
        for (std::size_t s = 0; s < seeded.size(); ++s) {
          const xt::xarray<T>& g = outer_tape->var(recording->outputs[seeded[s]]).grad();
          GradSlot<T> slot = t.grad_slot(parents[s]);  // d out_k[...] (+)= g[...]
          if (slot.accumulate)
            slot.buffer += g;
          else
            slot.buffer = g;
        }
      });
  return root;
}

// An input's gradient continues the sum the reverse pass has begun on its
// node (from uses recorded after the recompute, or an earlier backward into
// a leaf): its private leaf starts from that sum, fn's uses are added onto
// it in the order of the plain recording, and the total replaces the node's
// gradient. (Not for a Parameter's node, whose Parameter::grad the re-run
// may write to meanwhile, nor for an input given twice after its first
// place: those add their share at the end.) Returns which inputs continue.
template <class T>
std::vector<char> continue_input_sums(Tape<T>& tape, Tape<T>& outer, const Recording<T>& rec,
                                      const std::vector<Var<T>>& inputs) {
  std::vector<char> continued(rec.inputs.size(), 0);
  for (std::size_t k = 0; k < rec.inputs.size(); ++k) {
    const std::size_t i = rec.inputs[k];
    const auto before = rec.inputs.begin() + static_cast<std::ptrdiff_t>(k);
    if (!outer.requires_grad(i) || outer.node_param(i) != nullptr || !outer.node_has_grad(i) ||
        std::find(rec.inputs.begin(), before, i) != before)
      continue;
    GradSlot<T> leaf = tape.grad_slot(inputs[k].index());  // a fresh leaf: accumulate == false
    leaf.buffer = outer.var(i).grad();
    continued[k] = 1;
  }
  return continued;
}

// The backward rule of the "recompute" node: re-run fn on a recording tape,
// walk it back from the outputs' gradients, hand the inputs theirs.
template <class T>
void rerun_backward(Tape<T>& outer, const Recording<T>& rec) {
  PrivateTape<T> lease(true, outer.detect_anomaly());
  Tape<T>& tape = *lease;
  std::vector<Var<T>> inputs;
  for (const std::size_t i : rec.inputs)
    inputs.push_back(tape.leaf(outer.value(i), outer.requires_grad(i)));
  const std::vector<Var<T>> outputs = rec.fn(inputs);
  check_outputs(tape, outputs, "when re-run in backward");
  check_rerun(outer, rec, tape, outputs);
  const std::vector<std::size_t> seeded = seeded_outputs(rec, outputs);
  if (seeded.empty()) return;  // no gradient flows back to the inputs or Parameters

  const std::size_t root = record_seed(tape, outer, rec, outputs, seeded);
  const std::vector<char> continued = continue_input_sums(tape, outer, rec, inputs);
  tape.backward(tape.var(root), xt::xarray<T>(Shape{0}));
  // d input_k[...] = (its sum so far, then fn's uses)[...], or (+)= fn's uses
  for (std::size_t k = 0; k < rec.inputs.size(); ++k) {
    const std::size_t i = rec.inputs[k];
    if (!outer.requires_grad(i) || !tape.node_has_grad(inputs[k].index())) continue;
    GradSlot<T> slot = outer.grad_slot(i);
    if (slot.accumulate && !continued[k])
      slot.buffer += inputs[k].grad();
    else
      slot.buffer = inputs[k].grad();
  }
}

// Records the "recompute" node on `outer`: its parents are the inputs, then
// one "param" node per Parameter fn read in its first run (`first`), so that
// the recording shows it as their reader (see the header; their gradients are
// written by the re-run's own "param" nodes, never through these).
template <class T>
std::size_t record_core(Tape<T>& outer, const std::shared_ptr<Recording<T>>& rec,
                        const std::vector<Var<T>>& inputs, const Tape<T>& first) {
  rec->parameters = parameters_read(first);
  bool requires_grad = !rec->parameters.empty();
  // The Parameters first: recording one may start a fresh graph (tape.hpp,
  // "Lifetime"), which the inputs' index() then refuses, rather than a stale index.
  std::vector<std::size_t> params;
  for (const Parameter<T>* p : rec->parameters)
    params.push_back(outer.param(const_cast<Parameter<T>&>(*p)).index());
  for (const Var<T>& x : inputs) {
    rec->inputs.push_back(x.index());
    requires_grad = requires_grad || x.requires_grad();
  }
  std::vector<std::size_t> parents = rec->inputs;
  parents.insert(parents.end(), params.begin(), params.end());
  const std::size_t core = outer.record(k_op, parents, requires_grad);
  outer.value_mut(core).resize(Shape{0});
  outer.set_backward(core, [rec](Tape<T>& t, const xt::xarray<T>&) { rerun_backward(t, *rec); });
  return core;
}

// Records one "recompute_output" node per output of the first run, holding
// its value. The private tape is cleared afterwards: the values are moved
// out, except a Parameter's (which is p.value) and one an earlier output
// took already (copied).
template <class T>
std::vector<Var<T>> record_outputs(Tape<T>& outer, const std::shared_ptr<Recording<T>>& rec,
                                   std::size_t core, Tape<T>& first,
                                   const std::vector<Var<T>>& outputs) {
  const bool requires_grad = outer.requires_grad(core);
  std::vector<Var<T>> results;
  rec->reached.assign(outputs.size(), 0);
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    const std::size_t from = outputs[k].index();
    const std::size_t yi = outer.record("recompute_output", {core}, requires_grad);
    xt::xarray<T>& y = outer.value_mut(yi);
    const auto end = outputs.begin() + static_cast<std::ptrdiff_t>(k);
    const auto earlier =
        std::find_if(outputs.begin(), end, [from](const Var<T>& o) { return o.index() == from; });
    if (earlier != end) {
      y = outer.value(rec->outputs[static_cast<std::size_t>(earlier - outputs.begin())]);
    } else if (first.node_param(from) != nullptr) {
      y = first.value(from);
    } else {
      y = std::move(first.value_mut(from));
      // A moved-from array may keep its shape without storage: make the
      // node's buffer a valid empty one before the tape is reused.
      first.value_mut(from) = xt::xarray<T>(Shape{0});
    }
    rec->outputs.push_back(yi);
    outer.set_backward(yi, [rec, core, k](Tape<T>& t, const xt::xarray<T>&) {
      // The first output rule of a pass finds the core's slot unclaimed.
      if (!t.grad_slot(core).accumulate) std::fill(rec->reached.begin(), rec->reached.end(), 0);
      rec->reached[k] = 1;
    });
    results.push_back(outer.var(yi));
  }
  return results;
}

}  // namespace

template <class T>
std::vector<Var<T>> recompute(const RecomputeFn<NoDeduce<T>>& fn,
                              const std::vector<Var<T>>& inputs) {
  const detail::Check check(k_op);
  check.argument(bool(fn), "fn", "is empty; pass the function to recompute");
  check.argument(!inputs.empty(), "inputs",
                 "is empty; recompute needs at least one input Var (its tape is the tape the "
                 "recompute is recorded on)");
  Tape<T>& outer = inputs[0].tape_for(k_op, "inputs[0]");
  for (std::size_t k = 1; k < inputs.size(); ++k)
    outer.check_owns(inputs[k], k_op, ("inputs[" + std::to_string(k) + "]").c_str());
  if (!outer.grad_enabled()) return fn(inputs);

  // The first run: values only, on a private tape that keeps nothing after this.
  PrivateTape<T> lease(false, outer.detect_anomaly());
  Tape<T>& first = *lease;
  std::vector<Var<T>> private_inputs;
  for (const Var<T>& x : inputs) private_inputs.push_back(first.leaf(x.value(), false));
  const std::vector<Var<T>> outputs = fn(private_inputs);
  check_outputs(first, outputs, "in the forward");

  auto rec = std::make_shared<Recording<T>>();
  rec->fn = fn;
  const std::size_t core = record_core(outer, rec, inputs, first);
  return record_outputs(outer, rec, core, first, outputs);
}

template <class T>
Var<T> recompute(const std::function<Var<NoDeduce<T>>(const Var<NoDeduce<T>>&)>& fn,
                 const Var<T>& x) {
  detail::Check(k_op).argument(bool(fn), "fn", "is empty; pass the function to recompute");
  const RecomputeFn<T> wrapped = [fn](const std::vector<Var<T>>& in) {
    return std::vector<Var<T>>{fn(in[0])};
  };
  return recompute<T>(wrapped, std::vector<Var<T>>{x})[0];
}

template <class T>
void release_recompute_tapes() {
  PrivateTape<T>::free_tapes().clear();
}

template void release_recompute_tapes<float>();
template void release_recompute_tapes<double>();
template std::vector<Var<float>> recompute<float>(const RecomputeFn<float>&,
                                                  const std::vector<Var<float>>&);
template std::vector<Var<double>> recompute<double>(const RecomputeFn<double>&,
                                                    const std::vector<Var<double>>&);
template Var<float> recompute<float>(const std::function<Var<float>(const Var<float>&)>&,
                                     const Var<float>&);
template Var<double> recompute<double>(const std::function<Var<double>(const Var<double>&)>&,
                                       const Var<double>&);

}  // namespace xtgrad
