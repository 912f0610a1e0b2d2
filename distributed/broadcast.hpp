#pragma once
// broadcast_parameters: start every rank from the same model, as
// torch.nn.parallel.DistributedDataParallel's constructor does.
//
// First every rank's parameter list (names, shapes, dtype, in order) is
// compared with rank root's through an all-gather of a 64-bit hash of its
// description; when any differs, the root's and the first differing rank's
// descriptions are broadcast and every rank throws the same
// std::invalid_argument naming the first parameter that differs, so no rank
// is left waiting. Then root's values are broadcast into every rank's
// Parameters (gradients untouched). Collective: every rank calls it.

#include <string>
#include <utility>
#include <vector>

#include "../engine/parameter.hpp"
#include "../modules/module.hpp"
#include "communicator.hpp"

namespace xtgrad::distributed {

template <class T>
using NamedParameterList = std::vector<std::pair<std::string, Parameter<T>*>>;

template <class T>
void broadcast_parameters(const Communicator& comm, const NamedParameterList<T>& parameters,
                          int root = 0);
// expert_parallel.hpp: every parameter but the sharded experts'.
template <class T>
NamedParameterList<T> replicated_parameters(Module<T>& model);
// A module's parameters; with sharded experts (expert_parallel.hpp) its
// replicated ones only (each rank's experts are its own).
template <class T>
void broadcast_parameters(const Communicator& comm, Module<T>& module, int root = 0) {
  broadcast_parameters<T>(comm, replicated_parameters(module), root);
}

namespace detail {
// The check of broadcast_parameters alone (`who` names the caller in the
// message): throws on every rank when any rank's list differs from root's.
template <class T>
void check_same_parameters(const Communicator& comm, const NamedParameterList<T>& parameters,
                           int root, const char* who);
}  // namespace detail

extern template void broadcast_parameters(const Communicator&, const NamedParameterList<float>&,
                                          int);
extern template void broadcast_parameters(const Communicator&, const NamedParameterList<double>&,
                                          int);
extern template void detail::check_same_parameters(const Communicator&,
                                                   const NamedParameterList<float>&, int,
                                                   const char*);
extern template void detail::check_same_parameters(const Communicator&,
                                                   const NamedParameterList<double>&, int,
                                                   const char*);

}  // namespace xtgrad::distributed
