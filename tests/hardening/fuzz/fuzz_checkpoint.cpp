// libFuzzer target: a checkpoint directory (manifest.tsv and .npy files) through Module::load
// (see harness.hpp; built by tests/hardening/fuzz/CMakeLists.txt with XTGRAD_FUZZ=ON).
#include <cstddef>
#include <cstdint>

#include "harness.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  xtgrad::fuzz::checkpoint_one(data, size);
  return 0;
}
