// libFuzzer target: one safetensors file through read_safetensors, written
// back and read again (see harness.hpp; built by tests/hardening/fuzz/CMakeLists.txt
// with XTGRAD_FUZZ=ON).
#include <cstddef>
#include <cstdint>

#include "harness.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  xtgrad::fuzz::safetensors_one(data, size);
  return 0;
}
