#pragma once
// What the bench programs (bench_xtgrad, bench_attention) share beside the
// harness and the report: one timed row of the table, the description of the
// machine a run is on, the OpenMP wait policy LibTorch's workers run under,
// and the path to re-run this program (the peak-memory children).

#include <string>

#include "harness.hpp"
#include "report.hpp"

namespace xtgrad::bench {

// Times the contestants xtgrad, floor and libtorch (an empty Runner is
// skipped: its columns stay NaN) in interleaved rounds into a row, in
// `unit_seconds` units; ratios are paired_ratio's.
Row time_row(const std::string& section, const std::string& name, const std::string& unit,
             double unit_seconds, const Runner& xtgrad, const Runner& floor, const Runner& libtorch,
             const TimingOptions& timing);

// /proc/cpuinfo's model name ("unknown" when absent).
std::string cpu_model();
// The vector extensions /proc/cpuinfo lists among the ones xsimd can use.
std::string vector_extensions();
// A note when OpenBLAS runs kernels without AVX-512 on a CPU that has it
// (empty otherwise).
std::string openblas_core_note();
// /proc/loadavg's three averages.
std::string load_average();

// OMP_WAIT_POLICY as set, and whether it is PASSIVE.
std::string omp_wait_policy();
bool omp_passive();

// LibTorch's OpenMP workers (libgomp) spin-wait after every parallel region
// by default. On a shared or loaded machine the spinning costs them their
// scheduler credit, so that a parallel region then waits for a descheduled
// worker, and it steals a core from whatever runs next (xtgrad, the GEMM
// floor): measured here, LibTorch's activations 3-4x slower and the floor up
// to 2x. Passive waiting removes both. libgomp reads the variable when it is
// loaded, hence the re-execution: unless OMP_WAIT_POLICY is set or argv holds
// --omp-default, sets it to PASSIVE and re-executes this program (returns
// only if that fails: then the run measures as it is).
void reexec_with_passive_omp(char** argv);

// This program's path (/proc/self/exe); empty when unavailable.
std::string self_executable();

}  // namespace xtgrad::bench
