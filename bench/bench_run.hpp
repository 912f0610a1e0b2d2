#pragma once
// What bench_xtgrad and bench_attention share around their own sections:
// the options every bench program takes, the backends' setup, the header
// and record of the machine a run measured, and the table's outputs. Each
// program's Options derives from RunOptions and adds its own sizes.
//
//   int main(int argc, char** argv) {
//     Options o;  add_run_options(app, "bench_x", argc, argv, o, ...);  ...parse...
//     finish_run_options(o, flags);
//     return exit_status([&] { return run(o); });
//   }
//   int run(const Options& o) {
//     const Backends b = init_backends(o);
//     Meta meta = describe_run("bench_x", o, b);
//     ...rows of each wanted section...
//     report_run(rows, meta, o, legend);
//   }

#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "harness.hpp"
#include "report.hpp"

namespace xtgrad::bench {

struct RunOptions {
  bool quick = false;
  int threads = 2;
  // The sections that sweep threads run at each of these (default: 1 and --threads).
  std::vector<int> thread_counts;
  bool libtorch = true;  // when compiled in
  std::vector<std::string> sections;
  std::string csv, json, markdown;
  std::string command;            // this run's command line, for the record
  std::string precision = "f32";  // --precision: f32 | bf16 (xtgrad::set_matmul_precision)
  TimingOptions timing;
};

bool wants(const RunOptions& o, const std::string& section);
bool libtorch_on(const RunOptions& o);
// Every thread count in use: xtgrad's (and with it OpenBLAS's) and LibTorch's.
void use_threads(const RunOptions& o, int threads);

// The help texts that differ between programs.
struct RunHelp {
  std::string quick;          // --quick
  std::string thread_counts;  // --thread-counts
  std::string markdown;       // --markdown
  std::string precision;      // --precision
};
// Flags read once after parsing.
struct RunFlags {
  bool omp_default = false;  // read by reexec_with_passive_omp from argv
  bool no_libtorch = false;
};

// `o.command` from `program` and argv; --quick, --threads, --thread-counts, --sections
// (one of `all_sections`, all by default), --csv, --json, --markdown,
// --min-seconds, --omp-default, --no-libtorch and --precision.
void add_run_options(CLI::App& app, const std::string& program, int argc, char** argv,
                     RunOptions& o, RunFlags& flags, const std::vector<std::string>& all_sections,
                     const RunHelp& help);
// After parsing: LibTorch on unless --no-libtorch; thread_counts 1 and --threads
// unless given.
void finish_run_options(RunOptions& o, const RunFlags& flags);

// OpenBLAS's and LibTorch's descriptions of themselves.
struct Backends {
  std::string openblas, libtorch;
};
// OpenBLAS and xtgrad at o.threads, and LibTorch when it is on; xtgrad's
// matmul precision o.precision (std::invalid_argument for bf16 where it
// cannot run).
Backends init_backends(const RunOptions& o);

// Prints the machine line "<program>: <xtgrad::compute_info()>", then
// "<program>: N threads ..." with the backends, the CPU and the load
// average; returns the same as the run's record (Meta of report.hpp).
Meta describe_run(const std::string& program, const RunOptions& o, const Backends& backends);

// Prints the table, the load average at the end and `legend`, and writes
// the CSV, JSON and Markdown files that o asks for.
void report_run(const std::vector<Row>& rows, Meta meta, const RunOptions& o,
                const std::string& legend);

// run(), or 1 after printing the message of what it threw: main's status.
int exit_status(const std::function<int()>& run);

}  // namespace xtgrad::bench
