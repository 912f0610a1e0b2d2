// Writing safetensors files as the reference writer does (safetensors'
// tensor.rs, `prepare`): tensors sorted by dtype (F64 before F32), then by
// name; the header as serde_json's compact JSON with "__metadata__" first;
// padded with spaces to a multiple of 8 bytes; then the data in that order.

#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../engine/errors.hpp"
#include "safetensors_detail.hpp"

namespace xtgrad {

namespace {

namespace fs = std::filesystem;

constexpr char k_function[] = "write_safetensors";
constexpr std::size_t k_alignment = 8;

// A JSON string literal, escaped as serde_json escapes it; refuses text
// that is not valid UTF-8 (JSON strings are Unicode).
std::string json_string(const std::string& text, const std::string& arg, const std::string& what) {
  try {
    return nlohmann::json(text).dump();
  } catch (const nlohmann::json::exception&) {
    detail::fail_argument(k_function, arg,
                          "has " + what + " " + detail::quoted_name(text) +
                              " that is not valid UTF-8; safetensors headers are JSON");
  }
}

struct Planned {
  const std::string* name;
  const StoredTensor* tensor;
};

// The tensors in the reference writer's order: F64 first, then F32 (the
// dtypes it sorts in descending order), each by name.
std::vector<Planned> plan(const TensorMap& tensors) {
  std::vector<Planned> out;
  for (bool doubles : {true, false})
    for (const auto& [name, tensor] : tensors)
      if (tensor.holds<double>() == doubles) out.push_back({&name, &tensor});
  return out;
}

std::string header_json(const std::vector<Planned>& tensors, const SafetensorsMetadata& metadata,
                        std::vector<detail::ByteSpan>& data) {
  std::string out = "{";
  if (!metadata.empty()) {
    out += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : metadata) {
      out += (first ? "" : ",") + json_string(key, "metadata", "the key") + ":" +
             json_string(value, "metadata", "the value");
      first = false;
    }
    out += "}";
  }
  std::size_t offset = 0;
  for (const Planned& p : tensors) {
    if (*p.name == detail::k_safetensors_metadata_key)
      detail::fail_argument(k_function, "tensors",
                            "has a tensor named '__metadata__', a name the format reserves");
    const std::vector<std::size_t> shape = p.tensor->shape();
    if (shape.size() > detail::k_safetensors_max_dims)
      detail::fail_argument(k_function, "tensors",
                            "has tensor " + detail::quoted_name(*p.name) + " with " +
                                std::to_string(shape.size()) + " dimensions, at most " +
                                std::to_string(detail::k_safetensors_max_dims) + " are supported");
    const bool doubles = p.tensor->holds<double>();
    const void* values = doubles ? static_cast<const void*>(p.tensor->get<double>().data())
                                 : static_cast<const void*>(p.tensor->get<float>().data());
    std::size_t elements = 1;
    for (std::size_t d : shape) elements *= d;
    const std::size_t bytes = elements * (doubles ? sizeof(double) : sizeof(float));
    std::string dims;
    for (std::size_t i = 0; i < shape.size(); ++i)
      dims += (i ? "," : "") + std::to_string(shape[i]);
    if (out.size() > 1) out += ",";
    out += json_string(*p.name, "tensors", "the name") + ":{\"dtype\":\"" +
           (doubles ? "F64" : "F32") + "\",\"shape\":[" + dims + "],\"data_offsets\":[" +
           std::to_string(offset) + "," + std::to_string(offset + bytes) + "]}";
    offset += bytes;
    data.push_back({values, bytes});
  }
  out += "}";
  out.append((k_alignment - out.size() % k_alignment) % k_alignment, ' ');
  return out;
}

}  // namespace

void write_safetensors(const fs::path& path, const TensorMap& tensors,
                       const SafetensorsMetadata& metadata) {
  if (path.filename().empty() || path.filename() == "." || path.filename() == "..")
    detail::fail_argument(
        k_function, "path",
        detail::path_str(path) +
            " names a directory, expected a file path such as 'model.safetensors'");
  std::vector<detail::ByteSpan> data;
  const std::string header = header_json(plan(tensors), metadata, data);
  unsigned char prefix[8];
  for (std::size_t i = 0; i < sizeof prefix; ++i)
    prefix[i] = static_cast<unsigned char>(static_cast<std::uint64_t>(header.size()) >> (8 * i));
  std::vector<detail::ByteSpan> parts = {{prefix, sizeof prefix}, {header.data(), header.size()}};
  parts.insert(parts.end(), data.begin(), data.end());

  // Atomic: a temporary sibling, fsynced, then renamed over `path`.
  const fs::path temporary =
      path.parent_path() / (path.filename().string() + ".tmp-" + detail::random_suffix());
  detail::write_new_file(temporary, parts, k_function);
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temporary.c_str());
    detail::fail_errno(k_function, "", "rename a temporary file onto", path, error);
  }
  detail::fsync_directory(path.parent_path().empty() ? fs::path(".") : path.parent_path());
}

}  // namespace xtgrad
