#pragma once
// Internal: the .npy writer (npy_writer.cpp) as the checkpoint code calls
// it. save_npy, which it also defines, is declared in npy.hpp.

#include <filesystem>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

#include "npy_format.hpp"

namespace xtgrad::detail {

// The shape as Python writes a tuple: "()", "(3,)", "(2, 3)".
std::string npy_shape_tuple(const std::vector<std::size_t>& shape);

// "<f4" or "<f8": the descr save_npy writes for T.
template <class T>
constexpr const char* npy_descr() {
  return sizeof(T) == 4 ? "<f4" : "<f8";
}

// Writes `array` as .npy to the new file `path` (O_EXCL) and fsyncs it; on
// failure the partial file is removed. Messages start "xtgrad::<function>".
template <class T>
void write_npy_file(const std::filesystem::path& path, const xt::xarray<T>& array,
                    const std::string& function);

}  // namespace xtgrad::detail
