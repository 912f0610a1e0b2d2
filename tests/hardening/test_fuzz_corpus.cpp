// The replay of every saved fuzz input (tests/hardening/fuzz/corpus/<target>/:
// seeds and former crashes) through the harnesses of
// tests/hardening/fuzz/harness.hpp, in every build, sanitized or not.

#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "hardening/fuzz/harness.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
namespace fs = std::filesystem;

TEST_CASE("bad input: every saved fuzz input (seeds and former crashes) replays cleanly") {
  // The harnesses of tests/hardening/fuzz/harness.hpp let only the documented
  // exceptions through; here they run in the ordinary build, sanitized or not.
  using Harness = void (*)(const std::uint8_t*, std::size_t);
  const std::vector<std::pair<std::string, Harness>> targets = {
      {"npy", &fuzz::npy_one},
      {"checkpoint", &fuzz::checkpoint_one},
      {"state", &fuzz::state_one},
      {"tape", &fuzz::tape_one},
      {"safetensors", &fuzz::safetensors_one},
      {"idx", &fuzz::idx_one},
      {"sizes", &fuzz::sizes_one}};
  for (const auto& [name, harness] : targets) {
    const fs::path dir =
        fs::path(XTGRAD_SOURCE_DIR) / "tests" / "hardening" / "fuzz" / "corpus" / name;
    REQUIRE(fs::is_directory(dir));
    std::size_t inputs = 0;
    for (const auto& entry : fs::directory_iterator(dir)) {
      const std::string bytes = xtgrad::testing::read_file(entry.path());
      INFO("input " << entry.path().string());
      CHECK_NOTHROW(harness(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()));
      ++inputs;
    }
    CHECK(inputs > 0);
    MESSAGE("fuzz corpus " << name << ": " << inputs << " inputs replayed");
  }
}
