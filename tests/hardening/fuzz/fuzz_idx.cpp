// libFuzzer target: one IDX file, raw or gzip, through read_idx_header and
// load_idx of every element type (see harness.hpp; built by
// tests/hardening/fuzz/CMakeLists.txt with XTGRAD_FUZZ=ON).
#include <cstddef>
#include <cstdint>

#include "harness.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  xtgrad::fuzz::idx_one(data, size);
  return 0;
}
