#include "malloc_tuning.hpp"

#include <cstdlib>
#include <cstring>
#include <initializer_list>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace xtgrad::detail {

namespace {

// True when the user chose malloc's settings (or glibc's defaults) already.
bool environment_sets_malloc() {
  if (std::getenv("XTGRAD_MALLOC_DEFAULTS") != nullptr) return true;
  for (const char* name : {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_"})
    if (std::getenv(name) != nullptr) return true;
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  return tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr;
}

}  // namespace

bool tune_malloc() {
#if defined(__GLIBC__)
  if (environment_sets_malloc()) return false;
  // Both fit mallopt's int; M_MMAP_THRESHOLD first (setting either turns off
  // glibc's dynamic adjustment of both).
  const bool mmap = mallopt(M_MMAP_THRESHOLD, static_cast<int>(k_mmap_threshold)) == 1;
  const bool trim = mallopt(M_TRIM_THRESHOLD, static_cast<int>(k_trim_threshold)) == 1;
  return mmap && trim;
#else
  return false;
#endif
}

}  // namespace xtgrad::detail
