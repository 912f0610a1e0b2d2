#pragma once
// Internal (not included by any public header): the one implementation of
// loading named tensors into a module's parameters, behind
// Module::load_state_dict, Module::load of a safetensors checkpoint and
// load_checkpoint's name check: torch's missing / unexpected / size-mismatch
// rules and messages, all or nothing.

#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

#include "../io/safetensors.hpp"
#include "module.hpp"

namespace xtgrad::detail {

// One named tensor offered to a module: a T array, or a tensor read from a
// safetensors file (either type), or one a safetensors header declares (its
// dtype and shape, not yet read: it can be checked, not assigned), or none of
// these (a name seen but not read: it can only be unexpected).
template <class T>
struct SourceTensor {
  std::string name;
  const xt::xarray<T>* value = nullptr;
  const StoredTensor* stored = nullptr;
  const SafetensorsDeclared* declared = nullptr;
};

// The values of `stored` as T, converted as torch's copy_ converts: float32
// (F32, F16, BF16) into double exactly, float64 into float rounded to nearest.
template <class T>
xt::xarray<T> stored_as(const StoredTensor& stored);

extern template xt::xarray<float> stored_as(const StoredTensor&);
extern template xt::xarray<double> stored_as(const StoredTensor&);

// Whether a stored tensor of the other floating type is converted (as
// torch's copy_) or refused naming both dtypes.
enum class DtypeRule { convert, exact };

// The checks of load_sources alone, assigning nothing: what a checkpoint
// declares is refused before it is read.
template <class T>
IncompatibleKeys check_sources(const std::string& function, const std::string& type,
                               const std::vector<std::pair<std::string, Parameter<T>*>>& params,
                               const std::vector<SourceTensor<T>>& sources, bool strict,
                               DtypeRule rule);

// The checks and, when they pass, the assignment. Messages start
// "xtgrad::<function>: Error(s) in loading state_dict for <type>:", `type`
// being the module's type name (torch's class name).
template <class T>
IncompatibleKeys load_sources(const std::string& function, const std::string& type,
                              const std::vector<std::pair<std::string, Parameter<T>*>>& params,
                              const std::vector<SourceTensor<T>>& sources, bool strict,
                              DtypeRule rule);

extern template IncompatibleKeys load_sources(
    const std::string&, const std::string&,
    const std::vector<std::pair<std::string, Parameter<float>*>>&,
    const std::vector<SourceTensor<float>>&, bool, DtypeRule);
extern template IncompatibleKeys load_sources(
    const std::string&, const std::string&,
    const std::vector<std::pair<std::string, Parameter<double>*>>&,
    const std::vector<SourceTensor<double>>&, bool, DtypeRule);

extern template IncompatibleKeys check_sources(
    const std::string&, const std::string&,
    const std::vector<std::pair<std::string, Parameter<float>*>>&,
    const std::vector<SourceTensor<float>>&, bool, DtypeRule);
extern template IncompatibleKeys check_sources(
    const std::string&, const std::string&,
    const std::vector<std::pair<std::string, Parameter<double>*>>&,
    const std::vector<SourceTensor<double>>&, bool, DtypeRule);

}  // namespace xtgrad::detail
