// Writing .npy files: the header exactly as numpy formats it, the elements,
// and save_npy's atomic replace.
#include "npy_writer.hpp"

#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include "../engine/errors.hpp"
#include "files.hpp"

namespace xtgrad {

namespace {

namespace fs = std::filesystem;

// Preamble and header of a version 1.0 file of C-order little-endian T.
template <class T>
std::string npy_header(const std::vector<std::size_t>& shape) {
  // The dict exactly as numpy formats it (sorted keys, repr of each value).
  std::string dict = std::string("{'descr': '") + detail::npy_descr<T>() +
                     "', 'fortran_order': False, 'shape': " + detail::npy_shape_tuple(shape) +
                     ", }";
  const std::size_t used = detail::k_npy_preamble_size + 2 + dict.size() + 1;  // + the final '\n'
  dict.append((detail::k_npy_alignment - used % detail::k_npy_alignment) % detail::k_npy_alignment,
              ' ');
  dict += '\n';
  std::string out(detail::k_npy_magic, detail::k_npy_magic_size);
  out += '\x01';  // version 1.0
  out += '\x00';
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>(dict.size() >> 8);
  return out + dict;
}

}  // namespace

namespace detail {

std::string npy_shape_tuple(const std::vector<std::size_t>& shape) {
  std::string out = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) out += ",";
  return out + ")";
}

template <class T>
void write_npy_file(const fs::path& path, const xt::xarray<T>& array, const std::string& function) {
  const std::vector<std::size_t> shape(array.shape().begin(), array.shape().end());
  if (shape.size() > k_npy_max_dims)
    fail_value(function, "array for " + path_str(path) + " has " + std::to_string(shape.size()) +
                             " dimensions, at most " + std::to_string(k_npy_max_dims) +
                             " are supported");
  const std::string header = npy_header<T>(shape);
  // xt::xarray<T> is contiguous row-major: its buffer is the C-order data.
  write_new_file(path, {{header.data(), header.size()}, {array.data(), array.size() * sizeof(T)}},
                 function);
}

template void write_npy_file(const fs::path&, const xt::xarray<float>&, const std::string&);
template void write_npy_file(const fs::path&, const xt::xarray<double>&, const std::string&);

}  // namespace detail

template <class T>
void save_npy(const fs::path& path, const xt::xarray<T>& array) {
  if (path.filename().empty() || path.filename() == "." || path.filename() == "..")
    detail::fail_value("save_npy", "path " + detail::path_str(path) +
                                       " names a directory, expected a file path such as 'w.npy'");
  const fs::path temporary =
      path.parent_path() / (path.filename().string() + ".tmp-" + detail::random_suffix());
  detail::write_npy_file(temporary, array, "save_npy");
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temporary.c_str());
    detail::fail_errno("save_npy", "", "rename a temporary file onto", path, error);
  }
  detail::fsync_directory(path.parent_path().empty() ? fs::path(".") : path.parent_path());
}

template void save_npy(const fs::path&, const xt::xarray<float>&);
template void save_npy(const fs::path&, const xt::xarray<double>&);

}  // namespace xtgrad
