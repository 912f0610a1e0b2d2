#include "state_directory.hpp"

#include <limits>
#include <utility>
#include <vector>

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

// The bytes of the arrays the manifest declares, or SIZE_MAX on overflow.
std::size_t declared_bytes(const std::vector<detail::ManifestEntry>& entries,
                           std::size_t element_size) {
  constexpr std::size_t k_max = std::numeric_limits<std::size_t>::max();
  std::size_t total = 0;
  for (const detail::ManifestEntry& entry : entries) {
    std::size_t count = element_size;
    for (const std::size_t d : entry.shape) {
      if (d != 0 && count > k_max / d) return k_max;
      count *= d;
    }
    if (count > k_max - total) return k_max;
    total += count;
  }
  return total;
}

}  // namespace

template <class T>
void save_state_directory(const fs::path& dir, const StateDict<T>& state, const std::string& fn) {
  const std::string scalars =
      detail::format_scalars(fn, {state.integers, state.reals, state.strings});
  std::vector<std::pair<std::string, const xt::xarray<T>*>> arrays;
  for (const auto& [name, array] : state.arrays) arrays.emplace_back(name, &array);
  detail::write_directory(fn, dir, arrays, {{detail::k_scalars_name, scalars}});
}

template <class T>
StateDict<T> load_state_directory(const fs::path& dir, std::size_t max_array_bytes,
                                  const std::string& fn) {
  const detail::FileDescriptor dir_fd = detail::open_checkpoint_directory(fn, dir);
  const std::vector<detail::ManifestEntry> entries =
      detail::parse_manifest(fn, dir, detail::read_manifest(fn, dir_fd.get(), dir)).entries;
  for (const detail::ManifestEntry& entry : entries)
    if (entry.dtype != npy_dtype_name<T>())
      fail_value(fn, "array " + quoted(entry.name) + " of " + detail::path_str(dir) + " is " +
                         entry.dtype + ", expected " + npy_dtype_name<T>() +
                         "; xtgrad does not convert between float32 and float64 silently");
  const std::size_t bytes = declared_bytes(entries, sizeof(T));
  if (bytes > max_array_bytes)
    fail_value(fn, detail::path_str(dir) + " declares arrays of " +
                       (bytes == std::numeric_limits<std::size_t>::max()
                            ? std::string("more bytes than memory can hold")
                            : std::to_string(bytes) + " bytes in all") +
                       ", more than the " + std::to_string(max_array_bytes) + " this load allows");
  detail::Scalars scalars = detail::read_scalars(fn, dir_fd.get(), dir);

  StateDict<T> out;
  for (const detail::ManifestEntry& entry : entries) {
    detail::InputFile file = detail::open_directory_entry(fn, "array " + quoted(entry.name) + ": ",
                                                          dir_fd.get(), dir, entry.file);
    const NpyHeader header = detail::parse_npy_header(file);
    detail::check_npy_dtype<T>(file, header);
    if (header.shape != entry.shape)
      detail::fail_npy_content(file, "holds shape " + detail::shape_str(header.shape) +
                                         ", the manifest says " + detail::shape_str(entry.shape));
    out.arrays.emplace(entry.name, detail::read_npy_data<T>(file, header));
  }
  out.integers = std::move(scalars.integers);
  out.reals = std::move(scalars.reals);
  out.strings = std::move(scalars.strings);
  return out;
}

template void save_state_directory(const fs::path&, const StateDict<float>&, const std::string&);
template void save_state_directory(const fs::path&, const StateDict<double>&, const std::string&);
template StateDict<float> load_state_directory(const fs::path&, std::size_t, const std::string&);
template StateDict<double> load_state_directory(const fs::path&, std::size_t, const std::string&);

}  // namespace xtgrad
