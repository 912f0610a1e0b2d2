#pragma once
// Files the fixture generators wrote under tests/support/fixtures/ (the test
// targets get XTGRAD_SOURCE_DIR from tests/CMakeLists.txt).

#include <filesystem>
#include <string>

namespace xtgrad::testing {

// tests/support/fixtures/transformer/<name>: make_transformer.py's
// safetensors files and Hugging Face configurations.
inline std::filesystem::path transformer_fixture_file(const std::string& name) {
  return std::filesystem::path(XTGRAD_SOURCE_DIR) / "tests" / "support" / "fixtures" /
         "transformer" / name;
}

}  // namespace xtgrad::testing
