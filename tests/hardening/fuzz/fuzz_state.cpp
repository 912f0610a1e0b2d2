// libFuzzer target: a training-state directory (manifest.tsv, scalars.tsv and .npy files)
// through load_state_directory and load_training_state (see harness.hpp; built by
// tests/hardening/fuzz/CMakeLists.txt with XTGRAD_FUZZ=ON).
#include <cstddef>
#include <cstdint>

#include "harness.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  xtgrad::fuzz::state_one(data, size);
  return 0;
}
