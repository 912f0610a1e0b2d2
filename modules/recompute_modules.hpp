#pragma once
// Activation recomputation of modules (engine/recompute.hpp; the module
// form of torch.utils.checkpoint.checkpoint_sequential): the switches
// Sequential::set_recompute_every, PreNormResidual::set_recompute and
// Mlp::set_recompute are built on these.
//
//   y = recompute_modules({&a, &b}, x)   // y = b(a(x)), only x and y kept for backward
//
// The modules run once in the forward, recording nothing but their output,
// and again in the backward. A training Dropout advances its step (the key
// of its mask) at every forward, which would give the re-run other masks:
// for the re-run, the step of every Dropout among the modules and their
// descendants is set back to its value at the start of the forward, and put
// back afterwards (also when the re-run throws), so the re-run draws exactly
// the forward's masks and leaves the steps as it found them. Anything else a
// module changes per forward would make the re-run differ, which recompute
// refuses with std::logic_error (engine/recompute.hpp).
//
// When the tape of x does not record, the modules just run. The modules must
// outlive the recording's last backward (as their Parameters must anyway),
// and a module whose training mode changes between the forward and the
// backward re-runs differently (refused as above).

#include <functional>
#include <vector>

#include "module.hpp"

namespace xtgrad {

// modules[0], modules[1], ... applied in order to x, under one recompute.
// std::invalid_argument for an empty list or a null module.
template <class T>
Var<T> recompute_modules(const std::vector<Module<T>*>& modules, const Var<T>& x);

// body(x) under one recompute, the Dropouts of `owner` (itself included)
// restored for the re-run: for a module recomputing its own forward.
template <class T>
Var<T> recompute_module(Module<T>& owner, std::function<Var<T>(const Var<T>&)> body,
                        const Var<T>& x);

extern template Var<float> recompute_modules(const std::vector<Module<float>*>&, const Var<float>&);
extern template Var<double> recompute_modules(const std::vector<Module<double>*>&,
                                              const Var<double>&);
extern template Var<float> recompute_module(Module<float>&,
                                            std::function<Var<float>(const Var<float>&)>,
                                            const Var<float>&);
extern template Var<double> recompute_module(Module<double>&,
                                             std::function<Var<double>(const Var<double>&)>,
                                             const Var<double>&);

}  // namespace xtgrad
