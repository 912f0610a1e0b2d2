#pragma once
// Module<T>: the base of every layer. A module owns its Parameters as plain
// members (so copying a module copies its parameters) and lists them, with
// its children's, in collect_parameters; nothing else is stored, in
// particular no pointers to members, so copies and moves stay correct.
//
//   class Block : public Module<T> {
//     Parameter<T> scale;  Linear<T> proj;
//     void collect_parameters(const std::string& prefix, NamedParameters& out) override {
//       add_parameter(prefix, scale, out);       // "scale"
//       add_child(prefix, "proj", proj, out);    // "proj.weight", "proj.bias"
//     }
//   };
// (In a class template, write `typename Module<T>::NamedParameters` and
// `this->add_parameter`.)
//
// Checkpoints (save / load) are directories:
//   manifest.tsv        "xtgrad-checkpoint 1", then one line per parameter:
//                       name \t dtype (float32|float64) \t shape (2x16, 0, or scalar) \t file
//   <name>.npy          one NumPy file per parameter (numpy.load reads it)
// save writes a fresh sibling directory "<dir>.tmp-<random>" (files fsynced)
// and swaps it into place atomically (renameat2 RENAME_EXCHANGE), so an
// interrupted save leaves the previous checkpoint intact. load validates the
// whole checkpoint (names, dtypes, shapes, every file) before assigning
// anything, so a failed load leaves the module unchanged.
// Errors: std::invalid_argument for bad content (naming the parameter or
// file and what was expected), std::runtime_error for I/O failures.

#include <cstddef>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "../engine/parameter.hpp"
#include "../engine/tape.hpp"

namespace xtgrad {

namespace detail {
// TEST HOOK, not API: when set, Module::save calls it after writing each file
// of the temporary checkpoint (argument: files written so far). Tests make it
// throw to simulate a save interrupted part-way. Not thread-safe; leave empty.
inline std::function<void(std::size_t files_written)> checkpoint_write_hook;
}  // namespace detail

template <class T>
class Module {
 public:
  using NamedParameters = std::vector<std::pair<std::string, Parameter<T>*>>;

  virtual ~Module() = default;

  // Every parameter with its dotted name ("w1.weight"), in the order
  // collect_parameters lists them (stable). std::logic_error on a duplicate name.
  NamedParameters named_parameters();
  std::vector<std::pair<std::string, const Parameter<T>*>> named_parameters() const;
  std::vector<Parameter<T>*> parameters();

  // Parameter<T>::zero_grad() on every parameter.
  void zero_grad();

  // The module's computation, recorded on x's tape: y = module(x). A module
  // with one input overrides forward; as in torch.nn.Module, the base's
  // throws std::logic_error (a module that only holds parameters, or whose
  // inputs are not one tensor, does not need one).
  Var<T> operator()(const Var<T>& x) { return forward(x); }
  virtual Var<T> forward(const Var<T>& x);

  // Inference, array in, array out: the same values as forward, computed on
  // a private tape that does not record and is gone when infer returns, so
  // nothing is kept between calls (a serving loop cannot grow memory) and no
  // gradient is touched. Safe to call from several threads at once on one
  // module, as long as nothing changes the module meanwhile. x may be any
  // xtensor expression; bad shapes throw as forward does.
  xt::xarray<T> infer(const xt::xarray<T>& x) const;

  // Write a checkpoint directory (see above). `dir` must not exist, be an
  // empty directory, or be an xtgrad checkpoint (which is replaced); anything
  // else is refused with std::invalid_argument. Its parent must exist.
  void save(const std::filesystem::path& dir) const;
  // Read a checkpoint written by save: the parameter names must be exactly
  // this module's, with equal shapes and dtype T (no float32 <-> float64
  // conversion). All or nothing.
  void load(const std::filesystem::path& dir);

 protected:
  Module() = default;
  Module(const Module&) = default;
  Module& operator=(const Module&) = default;
  Module(Module&&) noexcept = default;
  Module& operator=(Module&&) noexcept = default;

  // Append this module's parameters and its children's, names under `prefix`.
  virtual void collect_parameters(const std::string& prefix, NamedParameters& out) = 0;

  // Appends (prefix + p.name, &p).
  static void add_parameter(const std::string& prefix, Parameter<T>& p, NamedParameters& out);
  // child.collect_parameters(prefix + child_name + ".", out).
  static void add_child(const std::string& prefix, const std::string& child_name, Module<T>& child,
                        NamedParameters& out);
};

extern template class Module<float>;
extern template class Module<double>;

}  // namespace xtgrad
