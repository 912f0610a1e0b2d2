// safetensors files (safetensors.hpp). Reading: the length prefix, the
// header's offsets and sizes against the file (before anything of a tensor's
// size is allocated), the data and the F16 / BF16 conversions; StoredTensor
// and the TensorMap helpers. The JSON header is parsed in
// safetensors_header.cpp.
//
// Writing, as the reference writer does (safetensors' tensor.rs, `prepare`):
// tensors sorted by dtype (F64 before F32), then by name; the header as
// serde_json's compact JSON with "__metadata__" first; padded with spaces to
// a multiple of 8 bytes; then the data in that order.
#include "safetensors.hpp"

#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "../engine/errors.hpp"
#include "npy.hpp"
#include "safetensors_detail.hpp"
#include "safetensors_header.hpp"

namespace xtgrad {

namespace {

namespace fs = std::filesystem;
using detail::fail_safetensors;
using detail::InputFile;
using detail::SafetensorsEntry;

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "xtgrad's safetensors I/O assumes a little-endian host");

constexpr std::size_t k_length_bytes = 8;  // the header length prefix

// IEEE 754 binary16 -> binary32, exactly: every half is a float.
float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  const std::uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  // Infinity and NaN (payload kept) keep an all-ones exponent; normal
  // numbers move from bias 15 to bias 127.
  const std::uint32_t bits =
      sign | (exponent == 0x1fu ? 0xffu << 23 : (exponent + 127 - 15) << 23) | mantissa << 13;
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

// bfloat16 is the upper half of a binary32.
float bfloat16_to_float(std::uint16_t b) {
  const std::uint32_t bits = static_cast<std::uint32_t>(b) << 16;
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

std::string declared(const SafetensorsEntry& e) {
  return "shape " + detail::shape_str(e.shape) + " of " + safetensors_dtype_name(e.dtype);
}

std::string offsets_str(const SafetensorsEntry& e) {
  return "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]";
}

// The byte count of an entry, refusing the shapes load_npy refuses: more
// bytes than a size_t counts, and any shape whose non-zero dimensions times
// the in-memory element size exceed ptrdiff_t (xtensor's strides), even
// when a zero dimension leaves no element.
std::size_t checked_bytes(const InputFile& file, const SafetensorsEntry& e) {
  const std::string tensor = "tensor " + detail::quoted_name(e.name) + ": ";
  const std::size_t item = detail::safetensors_dtype_size(e.dtype);
  const std::size_t stored_item = std::max<std::size_t>(item, sizeof(float));
  bool empty = false;
  for (std::size_t d : e.shape) empty = empty || d == 0;
  const std::string stride_limit =
      tensor + declared(e) + " does not fit array strides: its non-zero dimensions times " +
      std::to_string(stored_item) + " bytes exceed the largest signed 64-bit offset" +
      (empty ? " (even though it has no elements)" : "");
  std::size_t nonzero = 1;  // the product of the non-zero dimensions
  for (std::size_t d : e.shape) {
    if (d == 0) continue;
    if (nonzero > std::numeric_limits<std::size_t>::max() / d)
      fail_safetensors(
          file, empty ? stride_limit
                      : tensor + declared(e) + " has more elements than a 64-bit size counts");
    nonzero *= d;
  }
  if (nonzero > static_cast<std::size_t>(std::numeric_limits<std::ptrdiff_t>::max()) / stored_item)
    fail_safetensors(file, stride_limit);
  const std::size_t bytes = empty ? 0 : nonzero * item;
  if (e.end < e.begin) fail_safetensors(file, tensor + offsets_str(e) + " end before they begin");
  if (e.end - e.begin != bytes)
    fail_safetensors(file, tensor + offsets_str(e) + " hold " + std::to_string(e.end - e.begin) +
                               " bytes, but " + declared(e) + " has " + std::to_string(bytes));
  return bytes;
}

// The offsets, sorted by begin, must tile [0, data_size) exactly.
void check_tiling(const InputFile& file, const std::vector<SafetensorsEntry>& entries,
                  const std::vector<std::size_t>& order, std::size_t data_size) {
  std::size_t covered = 0;
  const SafetensorsEntry* previous = nullptr;
  for (std::size_t i : order) {
    const SafetensorsEntry& e = entries[i];
    if (e.begin < covered)
      fail_safetensors(file, "tensor " + detail::quoted_name(e.name) + ": " + offsets_str(e) +
                                 " overlap those of tensor " + detail::quoted_name(previous->name) +
                                 " (" + offsets_str(*previous) + ")");
    if (e.begin > covered)
      fail_safetensors(file, "the data has a gap: bytes [" + std::to_string(covered) + ", " +
                                 std::to_string(e.begin) + ") belong to no tensor (the next is " +
                                 detail::quoted_name(e.name) + ", " + offsets_str(e) + ")");
    covered = e.end;
    previous = &e;
  }
  const std::string needed = "the tensors take " + std::to_string(covered) + " data bytes";
  if (covered > data_size) {
    const SafetensorsEntry* cut = previous;  // the first tensor whose data runs past the end
    for (std::size_t i : order)
      if (entries[i].end > data_size) {
        cut = &entries[i];
        break;
      }
    fail_safetensors(file, "is truncated: " + needed + " but only " + std::to_string(data_size) +
                               " follow the header (tensor " + detail::quoted_name(cut->name) +
                               ", " + offsets_str(*cut) + ", is the first cut off)");
  }
  if (covered < data_size)
    fail_safetensors(file, "has trailing data: " + needed + " but " + std::to_string(data_size) +
                               " follow the header");
}

// Reads one validated entry at `offset` in the file.
StoredTensor read_tensor(InputFile& file, const SafetensorsEntry& e, std::size_t offset,
                         std::size_t bytes) {
  if (::lseek(file.fd.get(), static_cast<off_t>(offset), SEEK_SET) < 0)
    detail::fail_errno(file.function, file.context, "seek in", file.path, errno);
  if (e.dtype == SafetensorsDtype::F64) {
    auto array = xt::xarray<double>::from_shape(e.shape);
    detail::read_exact(file, array.data(), bytes);
    return StoredTensor(std::move(array));
  }
  auto array = xt::xarray<float>::from_shape(e.shape);
  if (e.dtype == SafetensorsDtype::F32) {
    detail::read_exact(file, array.data(), bytes);
    return StoredTensor(std::move(array));
  }
  std::vector<std::uint16_t> halves(array.size());
  detail::read_exact(file, halves.data(), bytes);
  const auto convert = e.dtype == SafetensorsDtype::F16 ? half_to_float : bfloat16_to_float;
  std::transform(halves.begin(), halves.end(), array.data(), convert);
  return StoredTensor(std::move(array), e.dtype);
}

}  // namespace

namespace detail {

std::size_t safetensors_dtype_size(SafetensorsDtype dtype) {
  return dtype == SafetensorsDtype::F64 ? 8 : dtype == SafetensorsDtype::F32 ? 4 : 2;
}

void fail_safetensors(const InputFile& file, const std::string& what) {
  fail_value(file.function, file.context + "file " + path_str(file.path) + ": " + what);
}

std::string quoted_name(const std::string& name) {
  return quoted_escaped(name);
}

}  // namespace detail

const char* safetensors_dtype_name(SafetensorsDtype dtype) {
  switch (dtype) {
    case SafetensorsDtype::F16:
      return "F16";
    case SafetensorsDtype::BF16:
      return "BF16";
    case SafetensorsDtype::F32:
      return "F32";
    default:
      return "F64";
  }
}

StoredTensor::StoredTensor() : value_(xt::xarray<float>::from_shape({0})) {}

StoredTensor::StoredTensor(xt::xarray<float> value, SafetensorsDtype dtype)
    : dtype_(dtype), value_(std::move(value)) {
  if (dtype == SafetensorsDtype::F64)
    detail::fail_argument("StoredTensor", "dtype",
                          "is F64 for float values, expected F32, F16 or BF16");
}

StoredTensor::StoredTensor(xt::xarray<double> value)
    : dtype_(SafetensorsDtype::F64), value_(std::move(value)) {}

std::vector<std::size_t> StoredTensor::shape() const {
  return std::visit(
      [](const auto& a) { return std::vector<std::size_t>(a.shape().begin(), a.shape().end()); },
      value_);
}

template <class T>
const xt::xarray<T>& StoredTensor::get() const {
  if (!holds<T>())
    detail::fail_value("StoredTensor::get",
                       std::string("the tensor holds ") + (holds<float>() ? "float32" : "float64") +
                           " values (" + safetensors_dtype_name(dtype_) + "), expected " +
                           npy_dtype_name<T>() +
                           "; xtgrad does not convert between float32 and float64 silently");
  return std::get<xt::xarray<T>>(value_);
}

namespace detail {

void fail_no_tensor(const std::string& function, const std::string& name,
                    const std::vector<const std::string*>& names) {
  std::string present;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i == 4) {
      present += ", ...";
      break;
    }
    present += (i ? ", " : "") + quoted_name(*names[i]);
  }
  fail_value(function, "no tensor " + quoted_name(name) + " (there are " +
                           std::to_string(names.size()) + " tensors" +
                           (names.empty() ? "" : ": " + present) + ")");
}

template <class T>
void fail_tensor_dtype(const std::string& function, const std::string& name,
                       SafetensorsDtype dtype) {
  fail_value(function, "tensor " + quoted_name(name) + " has dtype " +
                           safetensors_dtype_name(dtype) + ", expected " +
                           (sizeof(T) == 4 ? "F32 (or F16 / BF16)" : "F64") + " for " +
                           npy_dtype_name<T>() +
                           "; xtgrad does not convert between float32 and float64 silently");
}

template void fail_tensor_dtype<float>(const std::string&, const std::string&, SafetensorsDtype);
template void fail_tensor_dtype<double>(const std::string&, const std::string&, SafetensorsDtype);

}  // namespace detail

template <class T>
const xt::xarray<T>& get_tensor(const TensorMap& tensors, const std::string& name,
                                const std::string& function) {
  const auto found = tensors.find(name);
  if (found == tensors.end()) {
    std::vector<const std::string*> names;
    names.reserve(tensors.size());
    for (const auto& entry : tensors) names.push_back(&entry.first);
    detail::fail_no_tensor(function, name, names);
  }
  if (!found->second.holds<T>())
    detail::fail_tensor_dtype<T>(function, name, found->second.dtype());
  return found->second.get<T>();
}

Safetensors read_safetensors(const fs::path& path,
                             const std::function<bool(const std::string&)>& select,
                             const SafetensorsHeaderCheck& check_header) {
  return detail::read_safetensors_for("read_safetensors", path, select, check_header);
}

namespace detail {

Safetensors read_safetensors_for(const std::string& function, const fs::path& path,
                                 const std::function<bool(const std::string&)>& select,
                                 const SafetensorsHeaderCheck& check_header) {
  InputFile file = detail::open_regular_file(function, "", path);
  if (file.size < k_length_bytes)
    fail_safetensors(file, "has " + std::to_string(file.size) +
                               " bytes, too short for a safetensors file (an 8-byte header "
                               "length, then the header)");
  unsigned char prefix[k_length_bytes];
  detail::read_exact(file, prefix, k_length_bytes);
  std::uint64_t length = 0;
  for (std::size_t i = k_length_bytes; i-- > 0;) length = length << 8 | prefix[i];
  if (length > detail::k_safetensors_max_header)
    fail_safetensors(file, "header length " + std::to_string(length) + " exceeds the limit of " +
                               std::to_string(detail::k_safetensors_max_header) + " bytes");
  if (length > file.size - k_length_bytes)
    fail_safetensors(file, "header length " + std::to_string(length) +
                               " runs past the end of the file (" + std::to_string(file.size) +
                               " bytes)");
  std::string text(length, '\0');
  detail::read_exact(file, text.data(), length);
  detail::SafetensorsHeader header = detail::parse_safetensors_json(file, text);
  text = std::string();  // the header's memory is not held while tensors are read

  // Every size and offset is checked before any tensor is allocated.
  const std::vector<SafetensorsEntry>& entries = header.entries;
  std::vector<std::size_t> bytes(entries.size()), order(entries.size());
  for (std::size_t i = 0; i < entries.size(); ++i) bytes[i] = checked_bytes(file, entries[i]);
  std::iota(order.begin(), order.end(), std::size_t(0));
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return std::tie(entries[a].begin, entries[a].end) < std::tie(entries[b].begin, entries[b].end);
  });
  const std::size_t data_start = k_length_bytes + length;
  check_tiling(file, entries, order, file.size - data_start);

  if (check_header) {
    std::vector<SafetensorsDeclared> declared;
    declared.reserve(entries.size());
    for (std::size_t i : order)
      declared.push_back({entries[i].name, entries[i].dtype, entries[i].shape});
    check_header(declared, header.metadata);
  }

  Safetensors out;
  out.metadata = std::move(header.metadata);
  for (std::size_t i : order) {
    const SafetensorsEntry& e = entries[i];
    if (select && !select(e.name)) continue;
    out.tensors.emplace(e.name, read_tensor(file, e, data_start + e.begin, bytes[i]));
  }
  return out;
}

}  // namespace detail

template const xt::xarray<float>& StoredTensor::get<float>() const;
template const xt::xarray<double>& StoredTensor::get<double>() const;
template const xt::xarray<float>& get_tensor(const TensorMap&, const std::string&,
                                             const std::string&);
template const xt::xarray<double>& get_tensor(const TensorMap&, const std::string&,
                                              const std::string&);

}  // namespace xtgrad

// ---- Writing ----

namespace xtgrad {

namespace {

constexpr char k_safetensors_function[] = "write_safetensors";
constexpr std::size_t k_alignment = 8;

// A JSON string literal, escaped as serde_json escapes it; refuses text
// that is not valid UTF-8 (JSON strings are Unicode).
std::string json_string(const std::string& text, const std::string& arg, const std::string& what) {
  try {
    return nlohmann::json(text).dump();
  } catch (const nlohmann::json::exception&) {
    detail::fail_argument(k_safetensors_function, arg,
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
      detail::fail_argument(k_safetensors_function, "tensors",
                            "has a tensor named '__metadata__', a name the format reserves");
    const std::vector<std::size_t> shape = p.tensor->shape();
    if (shape.size() > detail::k_safetensors_max_dims)
      detail::fail_argument(k_safetensors_function, "tensors",
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
        k_safetensors_function, "path",
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
  detail::write_new_file(temporary, parts, k_safetensors_function);
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temporary.c_str());
    detail::fail_errno(k_safetensors_function, "", "rename a temporary file onto", path, error);
  }
  detail::fsync_directory(path.parent_path().empty() ? fs::path(".") : path.parent_path());
}

}  // namespace xtgrad
