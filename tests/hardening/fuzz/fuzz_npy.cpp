// libFuzzer target: one .npy file through read_npy_header and load_npy<float/double>
// (see harness.hpp; built by tests/hardening/fuzz/CMakeLists.txt with XTGRAD_FUZZ=ON).
#include <cstddef>
#include <cstdint>

#include "harness.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  xtgrad::fuzz::npy_one(data, size);
  return 0;
}
