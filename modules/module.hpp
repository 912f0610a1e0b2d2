#pragma once
// Module<T>: the base of every layer. A module owns its Parameters and
// child modules as plain members (so copying a module copies its parameters)
// and lists them in collect_parameters; nothing else is stored, in
// particular no pointers to members, so copies and moves stay correct.
// That one listing is the source of named_parameters, named_modules and of
// train() / eval() reaching every child: add_child tells the listing about
// the child before it lists the child's own members.
//
//   class Block : public Module<T> {
//     Parameter<T> scale;  Linear<T> proj;
//     void collect_parameters(const std::string& prefix, NamedParameters& out) override {
//       add_parameter(prefix, scale, out);       // "scale"
//       add_option(prefix, "n_head", n_head, out);  // config(): Module(n_head=4, ...)
//       add_child(prefix, "proj", proj, out);    // "proj.weight", "proj.bias"
//     }
//   };
// (In a class template, write `typename Module<T>::NamedParameters` and
// `this->add_parameter`.)
//
// Training mode, as torch.nn.Module: a module is built in training mode;
// train() / eval() set the mode of the module and of every descendant. Only
// modules whose forward differs between the two (Dropout, and the modules
// holding a dropout) read it.
//
// State dicts, as torch.nn.Module: state_dict() is the parameters' values by
// their dotted names (tensor_dict.hpp); load_state_dict takes such a dict, a
// TensorMap or a whole safetensors file (read_safetensors) back.
//
// Options: a hyperparameter that no parameter's shape shows (a number of
// attention heads, an eps, an activation) is registered with add_option beside
// the parameters, so that the base config() records it and a checkpoint of
// another architecture is refused; a module that overrides config() still
// has its registered options checked (config() gets those it lacks appended).
//
// save / load write and read a checkpoint that records the module's
// config() (io/module_config.hpp) beside the named parameters: a directory
// (io/checkpoint.hpp) or, for a path ending in ".safetensors", one
// safetensors file (safetensors_checkpoint.hpp). The formats, the atomic
// save, the all-or-nothing load and its errors are described there.

#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../engine/activation.hpp"
#include "../engine/parameter.hpp"
#include "../engine/tape.hpp"
#include "../io/module_config.hpp"
#include "tensor_dict.hpp"

namespace xtgrad {

class StoredTensor;  // io/safetensors.hpp
struct Safetensors;

namespace detail {
// Marks the calling thread as inside an infer call while alive (nestable):
// the one piece of state infer needs to give eval semantics without
// changing the module, kept per thread so that concurrent infer calls and
// training on other threads never see each other's.
class InferenceScope {
 public:
  InferenceScope() { ++depth(); }
  ~InferenceScope() { --depth(); }
  InferenceScope(const InferenceScope&) = delete;
  InferenceScope& operator=(const InferenceScope&) = delete;
  static bool active() { return depth() > 0; }

 private:
  static int& depth() {
    thread_local int d = 0;
    return d;
  }
};
}  // namespace detail

template <class T>
class Module {
 public:
  // The listing collect_parameters writes into: the named parameters, in
  // order; and, when on_child is set, a call for every child module as
  // add_child enters it (pre-order), with its dotted name.
  struct NamedParameters : std::vector<std::pair<std::string, Parameter<T>*>> {
    std::function<void(const std::string& name, Module<T>& child)> on_child;
    // When set, a call for every option add_option registers, with the
    // prefix of the module that registers it ("" for the module listed).
    std::function<void(const std::string& prefix, const std::string& key, const std::string& value)>
        on_option;
  };
  using NamedModules = std::vector<std::pair<std::string, Module<T>*>>;

  virtual ~Module() = default;

  // Every parameter with its dotted name ("w1.weight"), in the order
  // collect_parameters lists them (stable). std::logic_error on a duplicate name.
  NamedParameters named_parameters();
  std::vector<std::pair<std::string, const Parameter<T>*>> named_parameters() const;
  std::vector<Parameter<T>*> parameters();

  // The module itself (named "") and every descendant with its dotted name
  // ("ffn", "ffn.w1"), in pre-order, as torch.nn.Module.named_modules.
  NamedModules named_modules();

  // train(true) / train() / eval() = train(false): set is_training() on this
  // module and every descendant. Returns *this.
  Module& train(bool mode = true);
  Module& eval() { return train(false); }
  bool is_training() const { return training_; }

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
  // gradient is touched. Inference has eval() semantics whatever
  // is_training() says: within infer, on the calling thread, every module's
  // training_forward() is false (Dropout is the identity and its step does
  // not advance), so that infer changes nothing. Safe to call from several threads at once on one
  // module, as long as nothing changes the module meanwhile. x may be any
  // xtensor expression; bad shapes throw as forward does.
  xt::xarray<T> infer(const xt::xarray<T>& x) const;

  // What this module is: its type name and options (see io/module_config.hpp).
  // Every module of xtgrad overrides it. The base's, for a module that does
  // not, is type "Module" with the options it registers (add_option) and the
  // configs of its children: two such modules whose children differ, or
  // whose registered options differ, have different configs; an option it
  // does not register is not seen.
  virtual ModuleConfig config() const;
  // config() and the options this module registers that config() does not
  // list already, appended in registration order: what save records and
  // load compares. Equal to config() for a module that registers none.
  ModuleConfig checkpoint_config() const;

  // The parameters' values (copies) by their dotted names, in order.
  TensorDict<T> state_dict() const;

  // torch.nn.Module.load_state_dict: assigns every parameter of this module
  // the value of the same name. strict: the names must be exactly the
  // module's, else std::invalid_argument with torch's message,
  //   "xtgrad::Module::load_state_dict: Error(s) in loading state_dict for
  //   FeedForward:\n\tMissing key(s) in state_dict: "w2.weight", "w2.bias".
  //   \n\tUnexpected key(s) in state_dict: "w3.weight". "
  // (at most 50 names shown per list, then "... (N in all)"). Not strict:
  // missing and unexpected names are returned (IncompatibleKeys) and the
  // parameters present are loaded. In both modes a present name whose shape
  // differs is an error ("size mismatch for w1.weight: copying a param with
  // shape [16, 4] from checkpoint, the shape in current model is [8, 4].").
  // All or nothing: every check passes before any value changes; gradients
  // are untouched. Values are converted to T as torch's param.copy_(input)
  // converts: float64 to float32 rounds to nearest, float32 / F16 / BF16 to
  // float64 is exact (F16 and BF16 are read as float already).
  IncompatibleKeys load_state_dict(const TensorDict<T>& dict, bool strict = true);
  IncompatibleKeys load_state_dict(const std::map<std::string, StoredTensor>& tensors,
                                   bool strict = true);
  IncompatibleKeys load_state_dict(const Safetensors& file, bool strict = true);

  // Saves a checkpoint of config() and the named parameters, atomically.
  // A path ending in ".safetensors" is one safetensors file
  // (save_safetensors_checkpoint); any other path is a checkpoint directory
  // (save_checkpoint): it must not exist, be an empty directory, or be an
  // xtgrad checkpoint (which is replaced); anything else is refused with
  // std::invalid_argument. Its parent must exist.
  void save(const std::filesystem::path& path) const;
  // Loads a checkpoint written by save (chosen by the extension as save
  // chooses). Its config must equal config(), else std::invalid_argument
  // "xtgrad::Module::load: checkpoint '<path>' holds <its config>, this
  // module is <config()>"; the parameter names must be exactly this
  // module's, with equal shapes and dtype T (no float32 <-> float64
  // conversion). A directory of format version 1 (no config) is checked by
  // names, shapes and dtype only. All or nothing.
  void load(const std::filesystem::path& path);

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
  // Tells out.on_child (if set) about the child, then
  // child.collect_parameters(prefix + child_name + ".", out).
  static void add_child(const std::string& prefix, const std::string& child_name, Module<T>& child,
                        NamedParameters& out);

  // Registers an option of this module under `key`, for config() (see the
  // top of this file); call it in collect_parameters. value: a size or other
  // integer, a bool, a double, a string or an Activation, written as
  // ModuleConfig writes options ("4", "true", "1e-05", "gelu").
  template <class V>
  static void add_option(const std::string& prefix, const std::string& key, const V& value,
                         NamedParameters& out) {
    if (!out.on_option) return;  // a listing of parameters only: nothing to format
    out.on_option(prefix, key, option_text(value));
  }

  // A config of type `type`, the options this module registers, and the
  // configs of the direct children by name: the base config() and Sequential's.
  ModuleConfig children_config(std::string type) const;

  // True in training mode outside infer: the condition under which a
  // training-only behaviour (dropout) applies.
  bool training_forward() const { return training_ && !detail::InferenceScope::active(); }

 private:
  template <class V>
  static std::string option_text(const V& value) {
    if constexpr (std::is_same_v<V, Activation>) {
      return std::string(to_string(value));
    } else if constexpr (std::is_integral_v<V> && !std::is_same_v<V, bool>) {
      return std::to_string(value);
    } else {
      ModuleConfig formatted;
      formatted.add("", value);
      return formatted.options.back().second;
    }
  }
  // The options this module registers (prefix ""), in order.
  std::vector<std::pair<std::string, std::string>> registered_options() const;

  bool training_ = true;
};

extern template class Module<float>;
extern template class Module<double>;

}  // namespace xtgrad
