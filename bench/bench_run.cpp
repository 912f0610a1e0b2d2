// The shared frame of the bench programs (bench_run.hpp).

#include "bench_run.hpp"

#include <exception>
#include <iostream>

#include <xtgrad/engine/gemm_backend.hpp>
#include <xtgrad/engine/matmul_precision.hpp>
#include <xtgrad/engine/threads.hpp>

#include "cases.hpp"  // init_openblas, init_libtorch, libtorch_set_threads
#include "machine.hpp"

namespace xtgrad::bench {

bool wants(const RunOptions& o, const std::string& section) {
  for (const std::string& s : o.sections)
    if (s == section) return true;
  return false;
}

bool libtorch_on(const RunOptions& o) {
#ifdef XTGRAD_BENCH_LIBTORCH
  return o.libtorch;
#else
  (void)o;
  return false;
#endif
}

void use_threads(const RunOptions& o, int threads) {
  set_num_threads(threads);
#ifdef XTGRAD_BENCH_LIBTORCH
  if (libtorch_on(o)) libtorch_set_threads(threads);
#else
  (void)o;
#endif
}

void add_run_options(CLI::App& app, const std::string& program, int argc, char** argv,
                     RunOptions& o, RunFlags& flags, const std::vector<std::string>& all_sections,
                     const RunHelp& help) {
  o.command = program;
  for (int i = 1; i < argc; ++i) o.command += std::string(" ") + argv[i];
  o.sections = all_sections;
  std::string which = "which of:";
  for (const std::string& s : all_sections) which += " " + s;
  app.add_flag("--quick", o.quick, help.quick);
  app.add_option("--threads", o.threads, "OpenBLAS (and LibTorch) threads")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  app.add_option("--thread-counts", o.thread_counts, help.thread_counts)->check(CLI::Range(1, 256));
  app.add_option("--sections", o.sections, which)
      ->capture_default_str()
      ->check(CLI::IsMember(all_sections));
  app.add_option("--csv", o.csv, "also write the table as CSV to this path");
  app.add_option("--json", o.json, "also write the table and the run's settings as JSON here");
  app.add_option("--markdown", o.markdown, help.markdown);
  app.add_option("--min-seconds", o.timing.min_seconds,
                 "measure each contestant of a row for at least this long")
      ->capture_default_str();
  app.add_flag("--omp-default", flags.omp_default,
               "keep libgomp's default OMP_WAIT_POLICY (spinning) instead of PASSIVE");
  app.add_flag("--no-libtorch", flags.no_libtorch, "skip LibTorch even when it is compiled in");
  app.add_option("--precision", o.precision, help.precision)
      ->capture_default_str()
      ->check(CLI::IsMember({"f32", "bf16"}));
}

void finish_run_options(RunOptions& o, const RunFlags& flags) {
  o.libtorch = !flags.no_libtorch;
  if (o.thread_counts.empty()) {
    o.thread_counts = {1};
    if (o.threads != 1) o.thread_counts.push_back(o.threads);
  }
}

Backends init_backends(const RunOptions& o) {
  Backends b;
  b.openblas = init_openblas(o.threads);
  set_num_threads(o.threads);
  set_matmul_precision(o.precision == "bf16" ? MatmulPrecision::bf16 : MatmulPrecision::highest);
  b.libtorch = "off (configure with -DXTGRAD_BENCH_LIBTORCH=ON)";
#ifdef XTGRAD_BENCH_LIBTORCH
  b.libtorch = o.libtorch ? init_libtorch(o.threads) : "off (--no-libtorch)";
#endif
  return b;
}

Meta describe_run(const std::string& program, const RunOptions& o, const Backends& backends) {
  const std::string openblas_note = openblas_core_note();
  Meta meta{
      {"command", o.command},
      {"threads", std::to_string(o.threads)},
      {"openblas", backends.openblas},
      {"xtgrad_gemm", gemm_backend_info()},
      {"matmul_precision", matmul_precision_name(get_matmul_precision())},
      {"libtorch", backends.libtorch},
      {"cpu", cpu_model()},
      {"vector_extensions", vector_extensions()},
      {"load_average", load_average()},
      {"dtype", "float32"},
      {"quick", o.quick ? "true" : "false"},
      {"OMP_WAIT_POLICY", omp_wait_policy()},
      {"settle_seconds", std::to_string(o.timing.settle_seconds)},
      {"openblas_note", openblas_note.empty() ? "none" : openblas_note},
      {"statistic", "times: median over interleaved rounds; ratios: median of per-round ratios"}};
  std::cout << program << ": " << compute_info() << "\n";
  std::cout << program << ": " << o.threads << " threads (OpenBLAS and LibTorch), float32\n"
            << "  OpenBLAS: " << backends.openblas
            << "\n  xtgrad's float GEMMs: " << gemm_backend_info()
            << "\n  LibTorch: " << backends.libtorch << " (OMP_WAIT_POLICY " << omp_wait_policy()
            << ")"
            << "\n  CPU: " << cpu_model() << " (" << vector_extensions() << ")"
            << (openblas_note.empty() ? "" : "\n  note: " + openblas_note)
            << "\n  load average at start: " << load_average()
            << (o.quick ? "\n  --quick: smoke run, not a measurement" : "") << "\n";
  return meta;
}

void report_run(const std::vector<Row>& rows, Meta meta, const RunOptions& o,
                const std::string& legend) {
  print_table(rows, std::cout);
  meta.emplace_back("load_average_at_end", load_average());
  std::cout << "\nload average at end: " << load_average() << '\n' << legend;
  if (!o.csv.empty()) write_csv(rows, o.csv);
  if (!o.json.empty()) write_json(rows, meta, o.json);
  if (!o.markdown.empty()) write_markdown(rows, meta, o.markdown);
}

int exit_status(const std::function<int()>& run) {
  try {
    return run();
  } catch (const std::exception& e) {
    std::cerr << e.what() << '\n';
    return 1;
  }
}

}  // namespace xtgrad::bench
