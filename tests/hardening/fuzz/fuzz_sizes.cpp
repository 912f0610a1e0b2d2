// libFuzzer target: small and huge sizes through the mask builders, the shape ops and the
// attention, GPT and KvCache constructors (see harness.hpp; built by
// tests/hardening/fuzz/CMakeLists.txt with XTGRAD_FUZZ=ON).
#include <cstddef>
#include <cstdint>

#include "harness.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  xtgrad::fuzz::sizes_one(data, size);
  return 0;
}
