#pragma once
// safetensors files (Hugging Face's format, github.com/huggingface/safetensors):
//
//   8 bytes    N, the header length, unsigned 64-bit little-endian
//   N bytes    a JSON object, UTF-8, starting with '{' and possibly padded with
//              trailing spaces:
//                {"__metadata__": {"format": "pt"},
//                 "w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, ...}
//              "__metadata__" is optional and maps strings to strings.
//   the rest   the tensors' raw little-endian row-major bytes; each tensor's
//              [begin, end) offsets are relative to the first byte after the header.
//
// read_safetensors reads F32 and F64 as float and double arrays, and F16 and
// BF16 converted (exactly) to float; the dtype of the file is recorded. Other
// dtypes (integers, bool, F8) are refused. It is written for hostile input,
// with the limits of the reference reader and some more, each refused with a
// std::invalid_argument naming the file, the tensor and what was expected:
// a header over 100,000,000 bytes (the reference's MAX_HEADER_SIZE) or
// running past the end of the file; a header that is not one JSON object
// followed by nothing but whitespace (space, tab, CR, LF, as serde_json
// accepts: a NUL byte or any other byte after the object is refused naming
// its offset), or declares more than 100,000 tensors, or
// has a duplicate name or key, an unknown key in a tensor entry, a dtype,
// shape or data_offsets of the wrong kind, more than 64 dimensions, or a
// "__metadata__" that is not an object of strings; offsets that do not tile
// the data from 0 without gaps or overlaps (sorted by begin); a byte count
// that disagrees with shape x dtype size (overflow-checked, and every shape
// must keep xtensor's strides within a signed 64-bit offset, as load_npy
// requires); data past the end of the file or bytes after the last tensor.
// Memory is bounded by the file's size: the header is parsed as a stream
// straight into entries (no JSON tree), and each tensor is allocated only
// after the whole header has been checked against the file's size. Each
// tensor also costs a few hundred bytes of bookkeeping, whatever its size,
// hence the limit on their number (real checkpoints have at most a few
// thousand per file): a header of 100,000 empty tensors (5.8 MB) reads in
// about 55 MB.
//
// write_safetensors writes float arrays as F32 and double arrays as F64, in
// the reference writer's order (by dtype, F64 before F32, then by name), the
// compact JSON of serde_json with "__metadata__" first (sorted; left out when
// empty), padded with spaces to a multiple of 8 bytes. The write is atomic
// (a temporary file in the same directory, fsync, rename), so a failure
// never destroys an existing file.
//
// Errors: std::invalid_argument for bad content or arguments,
// std::runtime_error for I/O failures and for a path that is not a regular
// file (nothing but a regular file is ever opened for reading).

#include <cstddef>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include <xtensor/xarray.hpp>

namespace xtgrad {

// The dtypes xtgrad reads, by their names in the header.
enum class SafetensorsDtype { F16, BF16, F32, F64 };

// "F16", "BF16", "F32", "F64".
const char* safetensors_dtype_name(SafetensorsDtype dtype);

// A tensor of a safetensors file: a float array (from F32, F16 or BF16) or a
// double array (from F64), with the dtype it had in the file.
class StoredTensor {
 public:
  StoredTensor();  // an F32 tensor of shape [0]
  // `dtype`: F32, or F16 / BF16 for values read from such a file.
  explicit StoredTensor(xt::xarray<float> value, SafetensorsDtype dtype = SafetensorsDtype::F32);
  explicit StoredTensor(xt::xarray<double> value);

  SafetensorsDtype dtype() const { return dtype_; }
  std::vector<std::size_t> shape() const;
  // True when the values are held as T (float for F32, F16, BF16; double for F64).
  template <class T>
  bool holds() const {
    return std::holds_alternative<xt::xarray<T>>(value_);
  }
  // The values as T; std::invalid_argument when they are held as the other
  // type (no silent float32 <-> float64 conversion).
  template <class T>
  const xt::xarray<T>& get() const;

 private:
  SafetensorsDtype dtype_ = SafetensorsDtype::F32;
  std::variant<xt::xarray<float>, xt::xarray<double>> value_;
};

// Tensors by name, ordered by name (std::map's byte order, which is also the
// reference writer's order among tensors of one dtype).
using TensorMap = std::map<std::string, StoredTensor>;
using SafetensorsMetadata = std::map<std::string, std::string>;

struct Safetensors {
  TensorMap tensors;
  SafetensorsMetadata metadata;  // "__metadata__"; empty when the file has none
};

// What the header of a file declares of one tensor.
struct SafetensorsDeclared {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::F32;
  std::vector<std::size_t> shape;
};

// A check of a file from its header alone: every tensor it declares (in the
// order of their data) and its metadata, after the header has been checked
// against the file's size and before any tensor is allocated or read. It
// refuses the file by throwing: a file whose tensors do not fit a model costs
// the size of its header, however large the tensors it declares.
using SafetensorsHeaderCheck = std::function<void(const std::vector<SafetensorsDeclared>& tensors,
                                                  const SafetensorsMetadata& metadata)>;

// Reads `path`. When `select` is given, only the tensors it accepts are read
// and kept (the others are still validated, but skipped over): loading one
// layer of a large checkpoint costs that layer's memory. When `check_header`
// is given, it is called as described above before anything is read.
Safetensors read_safetensors(const std::filesystem::path& path,
                             const std::function<bool(const std::string& name)>& select = {},
                             const SafetensorsHeaderCheck& check_header = {});

// Writes `tensors` and `metadata` to `path` (see above). Names and metadata
// must be valid UTF-8; "__metadata__" is not a tensor name; a tensor has at
// most 64 dimensions.
void write_safetensors(const std::filesystem::path& path, const TensorMap& tensors,
                       const SafetensorsMetadata& metadata = {});

// tensors.at(name).get<T>(), with std::invalid_argument "xtgrad::<function>:
// no tensor 'name' ..." (listing a few names that are there) when it is
// missing, or naming the tensor when it is not held as T.
template <class T>
const xt::xarray<T>& get_tensor(const TensorMap& tensors, const std::string& name,
                                const std::string& function = "get_tensor");

extern template const xt::xarray<float>& StoredTensor::get<float>() const;
extern template const xt::xarray<double>& StoredTensor::get<double>() const;
extern template const xt::xarray<float>& get_tensor(const TensorMap&, const std::string&,
                                                    const std::string&);
extern template const xt::xarray<double>& get_tensor(const TensorMap&, const std::string&,
                                                     const std::string&);

}  // namespace xtgrad
