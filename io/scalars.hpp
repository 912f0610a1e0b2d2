#pragma once
// Internal (not included by any public header): scalars.tsv, the scalars of
// a training-state directory (the format is described in state_directory.hpp).

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

namespace xtgrad::detail {

inline constexpr char k_scalars_name[] = "scalars.tsv";

struct Scalars {
  std::map<std::string, std::int64_t> integers;
  std::map<std::string, double> reals;
  std::map<std::string, std::string> strings;
};

// "xtgrad-scalars 1\n", then "int64\tname\tvalue\n", "float64\tname\tvalue\n"
// (the shortest decimal that reads back as the same double) and
// "string\tname\tvalue\n". Throws std::invalid_argument naming `function`
// for a name that is not a plain file name or a string value with a control
// character.
std::string format_scalars(const std::string& function, const Scalars& scalars);

// Reads and parses scalars.tsv of the directory open as `dir_fd` (at path
// `dir`): a regular file inside it (see open_directory_entry) of at most a
// fixed size, every line checked. std::invalid_argument
// "xtgrad::<function>: '<file>' line <n>: ..." for bad content.
Scalars read_scalars(const std::string& function, int dir_fd, const std::filesystem::path& dir);

}  // namespace xtgrad::detail
