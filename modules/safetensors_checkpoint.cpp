#include "safetensors_checkpoint.hpp"

#include <set>
#include <vector>

#include "../engine/errors.hpp"
#include "../io/checkpoint.hpp"
#include "../io/files.hpp"
#include "../io/safetensors.hpp"
#include "state_loading.hpp"

namespace xtgrad {

namespace {

namespace fs = std::filesystem;

constexpr char k_version[] = "2";

// The metadata entry `key`, or a refusal naming what is missing.
const std::string& metadata_entry(const std::string& fn, const std::string& where,
                                  const SafetensorsMetadata& metadata, const char* key) {
  const auto found = metadata.find(key);
  if (found == metadata.end())
    detail::fail_value(fn, where + " has no " + detail::quoted(key) +
                               " in its __metadata__; expected a file written by Module::save");
  return found->second;
}

}  // namespace

template <class T>
TensorMap to_tensor_map(const Module<T>& module) {
  TensorMap out;
  for (const auto& [name, p] : module.named_parameters()) out.emplace(name, StoredTensor(p->value));
  return out;
}

template <class T>
void save_safetensors_checkpoint(const fs::path& path, const Module<T>& module) {
  const ModuleConfig config = module.checkpoint_config();
  const SafetensorsMetadata metadata = {{"format", "pt"},
                                        {k_safetensors_version_key, k_version},
                                        {k_safetensors_type_key, config.type},
                                        {k_safetensors_config_key, to_json(config)}};
  write_safetensors(path, to_tensor_map(module), metadata);
}

namespace {

// The metadata of an xtgrad checkpoint against the module: its format
// version, and its type and config against the module's config.
void check_checkpoint_metadata(const std::string& fn, const std::string& where,
                               const SafetensorsMetadata& metadata, const ModuleConfig& mine) {
  if (metadata.count(k_safetensors_version_key) == 0)
    detail::fail_value(fn, where + " has no " + detail::quoted(k_safetensors_version_key) +
                               " in its __metadata__, so it is not an xtgrad checkpoint; load "
                               "a state dict from any safetensors file with "
                               "module.load_state_dict(read_safetensors(path))");
  const std::string& version = metadata.at(k_safetensors_version_key);
  if (version != k_version)
    detail::fail_value(fn, where + " has format version " +
                               detail::quoted(detail::escaped(version, 200)) + ", expected " +
                               detail::quoted(k_version));
  const std::string& type = metadata_entry(fn, where, metadata, k_safetensors_type_key);
  const ModuleConfig stored =
      parse_module_config(metadata_entry(fn, where, metadata, k_safetensors_config_key), fn,
                          where + " " + k_safetensors_config_key);
  if (stored.type != type)
    detail::fail_value(fn, where + ": " + k_safetensors_type_key + " is " +
                               detail::quoted(detail::escaped(type, 200)) + " but " +
                               k_safetensors_config_key + " holds a " +
                               detail::quoted(detail::escaped(stored.type, 200)));
  if (stored != mine) fail_config_mismatch(fn, where, stored, mine);
}

}  // namespace

template <class T>
void load_safetensors_checkpoint(const fs::path& path, Module<T>& module, const std::string& fn) {
  const auto named = module.named_parameters();
  const std::vector<std::pair<std::string, Parameter<T>*>> params(named.begin(), named.end());
  std::set<std::string> wanted;
  for (const auto& entry : named) wanted.insert(entry.first);
  const std::string where = "checkpoint " + detail::path_str(path);
  const ModuleConfig mine = module.checkpoint_config();
  std::vector<std::string> names;  // every tensor of the file, in the order of its data
  // Everything the header declares (metadata, names, dtypes, shapes) is
  // checked against the module before any tensor is read.
  const auto check_header = [&](const std::vector<SafetensorsDeclared>& declared,
                                const SafetensorsMetadata& metadata) {
    check_checkpoint_metadata(fn, where, metadata, mine);
    std::vector<detail::SourceTensor<T>> sources;
    sources.reserve(declared.size());
    for (const SafetensorsDeclared& d : declared) {
      names.push_back(d.name);
      sources.push_back({d.name, nullptr, nullptr, wanted.count(d.name) ? &d : nullptr});
    }
    detail::check_sources<T>(fn, mine.type, params, sources, true, detail::DtypeRule::exact);
  };
  const Safetensors file = read_safetensors(
      path, [&](const std::string& name) { return wanted.count(name) > 0; }, check_header);

  std::vector<detail::SourceTensor<T>> sources;
  for (const std::string& name : names) {
    const auto found = file.tensors.find(name);
    sources.push_back({name, nullptr, found == file.tensors.end() ? nullptr : &found->second});
  }
  detail::load_sources<T>(fn, mine.type, params, sources, true, detail::DtypeRule::exact);
}

template TensorMap to_tensor_map(const Module<float>&);
template TensorMap to_tensor_map(const Module<double>&);
template void save_safetensors_checkpoint(const fs::path&, const Module<float>&);
template void save_safetensors_checkpoint(const fs::path&, const Module<double>&);
template void load_safetensors_checkpoint(const fs::path&, Module<float>&, const std::string&);
template void load_safetensors_checkpoint(const fs::path&, Module<double>&, const std::string&);

}  // namespace xtgrad
