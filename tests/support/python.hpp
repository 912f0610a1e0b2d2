#pragma once
// The python3 the tests may run NumPy scripts with, when there is one.

#include <cstdlib>
#include <string>

namespace xtgrad::testing {

// "/usr/bin/python3" or "python3" when it can import numpy, else "".
inline std::string python_with_numpy() {
  for (const char* candidate : {"/usr/bin/python3", "python3"}) {
    const std::string command = std::string(candidate) + " -c 'import numpy' >/dev/null 2>&1";
    if (std::system(command.c_str()) == 0) return candidate;
  }
  return "";
}

}  // namespace xtgrad::testing
