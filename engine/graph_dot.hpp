#pragma once
// A recorded tape as a Graphviz picture (DOT text), like torchviz's make_dot.
//
//   std::string dot = to_dot(tape, loss, model.named_parameters());
//   write_graph(dot, "step.svg");  // runs Graphviz's dot
//
// One DOT node per tape node, in tape order, each labelled with its op, its
// node index, its shape and its dtype, and drawn by what it is:
//   Parameter           blue box, labelled with its module name (the name in
//                       `names`, else Parameter::name)
//   leaf with gradient  green ellipse "input"
//   constant            grey dashed ellipse: a leaf without gradient, or an
//                       op computed from constants only (it carries no gradient)
//   op                  white rounded box; a fused op (activation_linear,
//                       gated_linear) is orange and says what it fuses
//   output              the Var(s) given, with a red double border
// An edge runs from each parent to the node that reads it (once per pair,
// also when an op lists a parent twice).

#include <string>
#include <utility>
#include <vector>

#include "parameter.hpp"
#include "tape.hpp"

namespace xtgrad {

// Module::named_parameters(), or any list of (name, Parameter*).
template <class T>
using ParameterNames = std::vector<std::pair<std::string, Parameter<T>*>>;

// The part of the tape that y depends on, y marked as the output.
template <class T>
std::string to_dot(const Tape<T>& tape, const Var<NoDeduce<T>>& y,
                   const ParameterNames<NoDeduce<T>>& names = {});
// The part every output depends on; with no outputs, the whole tape.
template <class T>
std::string to_dot(const Tape<T>& tape, const std::vector<Var<NoDeduce<T>>>& outputs,
                   const ParameterNames<NoDeduce<T>>& names = {});

// What a fused op fuses ("f(h) . W^T + b"), or null for an op that is not fused.
const char* fused_description(const char* op);

// Whether Graphviz's `dot` program is on PATH.
bool graphviz_available();

// Writes `dot` (text from to_dot) to `path`, in the format its extension
// names: .dot as the text itself, .svg, .png or .pdf rendered by Graphviz's
// dot. Atomic: a failure leaves an existing file at `path` as it was.
// Throws std::invalid_argument for another extension and std::runtime_error
// when dot is not installed (saying so) or fails.
void write_graph(const std::string& dot, const std::string& path);

extern template std::string to_dot(const Tape<float>&, const Var<float>&,
                                   const ParameterNames<float>&);
extern template std::string to_dot(const Tape<double>&, const Var<double>&,
                                   const ParameterNames<double>&);
extern template std::string to_dot(const Tape<float>&, const std::vector<Var<float>>&,
                                   const ParameterNames<float>&);
extern template std::string to_dot(const Tape<double>&, const std::vector<Var<double>>&,
                                   const ParameterNames<double>&);

}  // namespace xtgrad
