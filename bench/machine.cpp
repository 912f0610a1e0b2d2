#include "machine.hpp"

#include <strings.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include "cases.hpp"  // openblas_core

namespace xtgrad::bench {

Row time_row(const std::string& section, const std::string& name, const std::string& unit,
             double unit_seconds, const Runner& xtgrad, const Runner& floor, const Runner& libtorch,
             const TimingOptions& timing) {
  const std::array<const Runner*, 3> runners{&xtgrad, &floor, &libtorch};
  std::vector<Contestant> present;
  for (const Runner* r : runners)
    if (*r) present.push_back({"", *r});
  const std::vector<Timing> timings = measure_interleaved(present, timing);
  std::optional<Timing> t[3];
  std::size_t k = 0;
  for (int i = 0; i < 3; ++i)
    if (*runners[i]) t[i] = timings[k++];
  Row row{section, name, unit};
  const auto value = [&](int i) { return t[i] ? t[i]->median / unit_seconds : k_nan; };
  const auto paired = [&](int i, int j) {
    return t[i] && t[j] ? paired_ratio(*t[i], *t[j]) : k_nan;
  };
  row.xtgrad = value(0);
  row.floor = value(1);
  row.libtorch = value(2);
  row.xtgrad_over_floor = paired(0, 1);
  row.libtorch_over_floor = paired(2, 1);
  row.xtgrad_over_libtorch = paired(0, 2);
  return row;
}

std::string cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

std::string vector_extensions() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line))
    if (line.rfind("flags", 0) == 0) break;
  std::istringstream flags(line.substr(line.find(':') + 1));
  std::string out, flag;
  while (flags >> flag)
    for (const char* known : {"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_bf16",
                              "amx_tile", "amx_bf16", "amx_int8"})
      if (flag == known) out += (out.empty() ? "" : " ") + flag;
  return out.empty() ? "none of avx2, avx512, amx" : out;
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

bool omp_passive() {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  return policy && strcasecmp(policy, "PASSIVE") == 0;
}

std::string omp_wait_policy() {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  return policy ? policy : "unset (libgomp's default: spin, then sleep)";
}

void reexec_with_passive_omp(char** argv) {
  bool omp_default = false;
  for (int i = 1; argv[i]; ++i)
    omp_default = omp_default || std::string(argv[i]) == "--omp-default";
  if (!omp_default && std::getenv("OMP_WAIT_POLICY") == nullptr) {
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    execv("/proc/self/exe", argv);  // returns only on failure
  }
}

// OpenBLAS 0.3.21 does not know AMD's Zen 5 and falls back to its Haswell
// (AVX2) kernels there; with OPENBLAS_CORETYPE=SkylakeX its AVX-512 sgemm
// ran FFN training 1.8x faster (2-core EPYC, forward + backward at N = 1024).
std::string openblas_core_note() {
  const std::string core = openblas_core();
  if (vector_extensions().find("avx512f") == std::string::npos) return "";
  for (const char* avx512 : {"SkylakeX", "Cooperlake", "SapphireRapids"})
    if (core == avx512) return "";
  return "OpenBLAS runs its " + core +
         " kernels (no AVX-512) on this AVX-512 CPU; OPENBLAS_CORETYPE=SkylakeX selects its "
         "AVX-512 ones";
}

std::string self_executable() {
  char exe[4096];
  const ssize_t length = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (length <= 0) return "";
  return std::string(exe, static_cast<std::size_t>(length));
}

}  // namespace xtgrad::bench
