#include "checkpoint.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <set>
#include <system_error>

#include "../engine/errors.hpp"
#include "directory.hpp"
#include "files.hpp"
#include "manifest.hpp"
#include "npy_detail.hpp"
#include "scalars.hpp"

namespace xtgrad {

namespace {

namespace fs = std::filesystem;
using detail::fail_value;
using detail::quoted;

// How much of a name read from a manifest a message quotes.
constexpr std::size_t k_max_quoted_name = 200;

std::string name_list(const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i)
    out += (i ? ", " : "") + quoted(detail::escaped(names[i], k_max_quoted_name));
  return out;
}

template <class A, class B>
bool equal_shape(const A& a, const B& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

// The manifest's entries, checked against `params`: the same names, and for
// each the dtype T and the parameter's shape. In the order of `params`.
template <class T>
std::vector<detail::ManifestEntry> matching_entries(
    const std::string& fn, const fs::path& dir,
    const std::vector<std::pair<std::string, Parameter<T>*>>& params,
    std::vector<detail::ManifestEntry> entries, bool training_state) {
  std::map<std::string, const detail::ManifestEntry*> by_name;
  for (const detail::ManifestEntry& entry : entries) by_name[entry.name] = &entry;
  std::vector<std::string> missing, unexpected;
  std::set<std::string> param_names;
  for (const auto& [name, p] : params) {
    param_names.insert(name);
    if (by_name.count(name) == 0) missing.push_back(name);
  }
  for (const detail::ManifestEntry& entry : entries)
    if (param_names.count(entry.name) == 0) unexpected.push_back(entry.name);
  if (!missing.empty() || !unexpected.empty()) {
    std::string what = "checkpoint " + detail::path_str(dir) + " does not match the module:";
    if (!missing.empty()) what += " missing parameter(s) " + name_list(missing) + ";";
    if (!unexpected.empty())
      what += " unexpected parameter(s) " + name_list(unexpected) + " (not in the module);";
    what.pop_back();
    if (training_state)
      what +=
          " (it is a training-state directory: load_model_from_training_state loads its "
          "model)";
    fail_value(fn, what);
  }
  std::vector<detail::ManifestEntry> out;
  for (const auto& [name, p] : params) {
    const detail::ManifestEntry& entry = *by_name.at(name);
    const std::string at = "parameter " + quoted(name) + ": checkpoint " + detail::path_str(dir);
    if (entry.dtype != npy_dtype_name<T>())
      fail_value(fn, at + " stores " + entry.dtype + ", the module's parameter is " +
                         npy_dtype_name<T>() +
                         "; xtgrad does not convert between float32 and float64 silently");
    if (!equal_shape(entry.shape, p->value.shape()))
      fail_value(fn, at + " has shape " + detail::shape_str(entry.shape) + ", the module expects " +
                         detail::shape_str(p->value.shape()));
    out.push_back(entry);
  }
  return out;
}

// How much of a name or value, and of each whole config, a mismatch shows.
constexpr std::size_t k_max_shown_value = 100;
constexpr std::size_t k_max_shown_config = 120;

std::string shown(const std::string& text) {
  return quoted(detail::escaped(text, k_max_shown_value));
}

std::string shortened(const std::string& text) {
  return text.size() <= k_max_shown_config ? text : text.substr(0, k_max_shown_config) + "...";
}

// The first difference between two configs, walked in the order describe()
// prints them (type, options, children), with the dotted path of the child
// it is in: "'d_ff' was saved as '16', this module has '8'"; "" when they
// are equal.
std::string first_difference(const ModuleConfig& stored, const ModuleConfig& module,
                             const std::string& path) {
  const auto both = [](const std::string& a, const std::string& b) {
    return " was saved as " + a + ", this module has " + b;
  };
  if (stored.type != module.type)
    return shown(path + "type") + both(shown(stored.type), shown(module.type));
  const auto value_of = [](const ModuleConfig& c, const std::string& key) -> const std::string* {
    for (const auto& [k, v] : c.options)
      if (k == key) return &v;
    return nullptr;
  };
  for (const auto& [key, value] : stored.options) {
    const std::string* other = value_of(module, key);
    if (!other || *other != value)
      return shown(path + key) + both(shown(value), other ? shown(*other) : "none");
  }
  for (const auto& [key, value] : module.options)
    if (!value_of(stored, key))
      return shown(path + key) + " was not saved, this module has " + shown(value);
  if (stored.options != module.options)
    return "the options of " + (path.empty() ? "the module" : shown(path)) +
           " were saved in another order";
  for (std::size_t i = 0; i < stored.children.size() || i < module.children.size(); ++i) {
    const std::string child =
        path + (i < stored.children.size() ? stored.children[i].first : module.children[i].first);
    if (i >= module.children.size())
      return "child " + shown(child) +
             both(shortened(stored.children[i].second.describe()), "none");
    if (i >= stored.children.size())
      return "child " + shown(child) + " was not saved, this module has " +
             shortened(module.children[i].second.describe());
    const auto& [name_a, a] = stored.children[i];
    const auto& [name_b, b] = module.children[i];
    if (name_a != name_b)
      return "the name of child " + shown(child) + both(shown(name_a), shown(name_b));
    const std::string inner = first_difference(a, b, path + name_a + ".");
    if (!inner.empty()) return inner;
  }
  return "";
}

}  // namespace

void fail_config_mismatch(const std::string& caller, const std::string& what,
                          const ModuleConfig& stored, const ModuleConfig& module) {
  fail_value(caller, what + ": " + first_difference(stored, module, "") + "; it holds " +
                         shortened(stored.describe()) + ", this module is " +
                         shortened(module.describe()));
}

template <class T>
void save_checkpoint(const fs::path& dir,
                     const std::vector<std::pair<std::string, const Parameter<T>*>>& params,
                     const std::string& fn, const std::optional<ModuleConfig>& config) {
  for (const auto& [name, p] : params)
    if (!detail::is_plain_file_name(name))
      fail_value(fn, "parameter name " + quoted(detail::escaped(name)) +
                         " cannot name a checkpoint file: expected no '/', no control "
                         "characters and no leading '.'");
  std::vector<std::pair<std::string, const xt::xarray<T>*>> arrays;
  for (const auto& [name, p] : params) arrays.emplace_back(name, &p->value);
  detail::write_directory(fn, dir, arrays, {}, config);
}

template <class T>
void load_checkpoint(const fs::path& dir,
                     const std::vector<std::pair<std::string, Parameter<T>*>>& params,
                     const std::string& fn, const std::optional<ModuleConfig>& expected) {
  const detail::FileDescriptor dir_fd = detail::open_checkpoint_directory(fn, dir);
  detail::Manifest manifest =
      detail::parse_manifest(fn, dir, detail::read_manifest(fn, dir_fd.get(), dir));
  if (expected && manifest.config && *manifest.config != *expected)
    fail_config_mismatch(fn, "checkpoint " + detail::path_str(dir), *manifest.config, *expected);
  struct ::stat info {};
  const bool training_state =
      ::fstatat(dir_fd.get(), detail::k_scalars_name, &info, AT_SYMLINK_NOFOLLOW) == 0;
  const std::vector<detail::ManifestEntry> entries =
      matching_entries(fn, dir, params, std::move(manifest.entries), training_state);

  // Read and check everything before assigning anything (all or nothing).
  // Each header is compared with its parameter before its data is read, so
  // that no more than the parameters' own size is ever allocated.
  std::vector<xt::xarray<T>> values;
  values.reserve(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Parameter<T>& p = *params[i].second;
    const detail::ManifestEntry& entry = entries[i];
    detail::InputFile file = detail::open_directory_entry(
        fn, "parameter " + quoted(params[i].first) + ": ", dir_fd.get(), dir, entry.file);
    const NpyHeader header = detail::parse_npy_header(file);
    detail::check_npy_dtype<T>(file, header);
    if (!equal_shape(header.shape, p.value.shape()))
      detail::fail_npy_content(file, "holds shape " + detail::shape_str(header.shape) +
                                         ", the manifest says " + detail::shape_str(entry.shape) +
                                         " and the module expects " +
                                         detail::shape_str(p.value.shape()));
    values.push_back(detail::read_npy_data<T>(file, header));
  }
  for (std::size_t i = 0; i < params.size(); ++i) params[i].second->set_value(std::move(values[i]));
}

template void save_checkpoint(const fs::path&,
                              const std::vector<std::pair<std::string, const Parameter<float>*>>&,
                              const std::string&, const std::optional<ModuleConfig>&);
template void save_checkpoint(const fs::path&,
                              const std::vector<std::pair<std::string, const Parameter<double>*>>&,
                              const std::string&, const std::optional<ModuleConfig>&);
template void load_checkpoint(const fs::path&,
                              const std::vector<std::pair<std::string, Parameter<float>*>>&,
                              const std::string&, const std::optional<ModuleConfig>&);
template void load_checkpoint(const fs::path&,
                              const std::vector<std::pair<std::string, Parameter<double>*>>&,
                              const std::string&, const std::optional<ModuleConfig>&);

}  // namespace xtgrad
