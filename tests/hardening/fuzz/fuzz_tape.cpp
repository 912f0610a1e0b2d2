// libFuzzer target: a program of ops, backward, clear, modes and optimizer steps on two tapes
// (see harness.hpp; built by tests/hardening/fuzz/CMakeLists.txt with XTGRAD_FUZZ=ON).
#include <cstddef>
#include <cstdint>

#include "harness.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  xtgrad::fuzz::tape_one(data, size);
  return 0;
}
