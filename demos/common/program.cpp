// demos::Program (program.hpp).

#include "program.hpp"

#include <cstdint>
#include <cstdio>
#include <utility>

#include <xtgrad/engine/gemm_backend.hpp>
#include <xtgrad/engine/matmul_precision.hpp>
#include <xtgrad/engine/threads.hpp>
#include <xtgrad/engine/weight_packing.hpp>
#include <xtgrad/training/run_state.hpp>

namespace demos {

void add_extras(xtgrad::TrainingExtras& extras, const std::string& prefix,
                const nlohmann::json& values) {
  for (const auto& item : values.items()) {
    const nlohmann::json& v = item.value();
    if (v.is_number_float())
      extras.reals[prefix + item.key()] = v.get<double>();
    else if (v.is_number_unsigned())
      extras.integers[prefix + item.key()] = xtgrad::training::seed_bits(v.get<std::uint64_t>());
    else
      extras.integers[prefix + item.key()] = v.get<std::int64_t>();
  }
}

Program::Program(int& argc, char**& argv, std::string program, const std::string& description)
    : parallel(argc, argv), app(description), name(std::move(program)) {}

void Program::add_out(std::string& out) {
  app.add_option("--out", out, "output directory")->capture_default_str();
}

void Program::add_threads(int& threads, const std::string& help) {
  app.add_option("--threads", threads, help)->capture_default_str()->check(CLI::Range(1, 256));
}

void Program::add_save_resume(std::filesystem::path& save, std::filesystem::path& resume,
                              const std::string& save_help) {
  app.add_option("--save", save, save_help);
  app.add_option("--resume", resume,
                 "continue the run saved in DIR, bit for bit as if it had not stopped (the "
                 "model and training options must be the same)")
      ->check(CLI::ExistingDirectory);
}

void Program::add_stop_after(std::size_t& stop_after, const std::string& unit,
                             const std::string& steps, int max) {
  app.add_option("--stop-after", stop_after,
                 "stop after this " + unit + " of the --" + steps + " run (the schedule still " +
                     "spans --" + steps + "); --save then --resume continues it")
      ->check(CLI::Range(1, max));
}

void Program::add_zero(int& zero, const std::string& stages) {
  app.add_option("--zero", zero,
                 "under mpirun, ZeRO: " + stages +
                     " In one process 1 and 2 train as 0 (the one shard is everything), as "
                     "DeepSpeed's ZeRO on one GPU does, so one command line serves any -np")
      ->capture_default_str()
      ->check(CLI::IsMember({0, 1, 2}));
}

void Program::add_observer(xtgrad::training::StepObserverOptions& o) {
  observe_ = &o;
  app.add_option("--graph", o.graph,
                 "write the tape of the first training step as a picture (.svg, .png, .pdf via "
                 "Graphviz's dot, or .dot text)");
  app.add_flag("--profile", o.profile, "print the per-op profile of the last training steps");
  app.add_option("--profile-steps", o.profile_steps, "how many last steps --profile times")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000000));
  app.add_option("--profile-sort", o.profile_sort,
                 "sort the profile by name, calls, self, total, average, share, flops, gflops, "
                 "bytes or gbytes")
      ->capture_default_str()
      ->check(CLI::IsMember({"name", "calls", "self", "total", "average", "share", "flops",
                             "gflops", "bytes", "gbytes"}));
  app.add_option("--profile-csv", o.profile_csv, "also write the profile as CSV");
  app.add_option("--profile-json", o.profile_json, "also write the profile as JSON");
}

void Program::add_precision(std::string& precision) {
  app.add_option("--precision", precision,
                 "float GEMMs in f32, or bf16 (inputs rounded to bfloat16, float accumulation; "
                 "needs AMX or AVX512-BF16); tensors and optimizer state stay float")
      ->capture_default_str()
      ->check(CLI::IsMember({"f32", "bf16"}));
}

void Program::add_app(AppOptions& o, const std::string& threads_help,
                      const std::string& data_help) {
  add_threads(o.threads, threads_help);
  app_threads_ = &o.threads;
  add_precision(o.precision);
  add_out(o.out);
  app.add_option("--data-dir", o.data_dir, data_help)->capture_default_str();
}

void Program::start(const AppOptions& o) {
  start_ = std::chrono::steady_clock::now();
  xtgrad::set_num_threads(o.threads);
  start_compute(o.precision);
}

double Program::seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Program::start_compute(const std::string& precision) const {
  xtgrad::set_matmul_precision(precision == "bf16" ? xtgrad::MatmulPrecision::bf16
                                                   : xtgrad::MatmulPrecision::highest);
  // The demos write weights only through xtgrad's optimizers and loaders,
  // which is what packed weights ask of a program (weight_packing.hpp); the
  // bits are the same either way.
  xtgrad::set_weight_packing(true);
  if (!parallel.quiet()) std::printf("%s: %s\n", name.c_str(), xtgrad::compute_info().c_str());
}

std::optional<int> Program::parse(int argc, char** argv, const std::function<void()>& check) {
  try {
    app.parse(argc, argv);
    if (check) check();
    if (app_threads_ != nullptr && parallel.active() && app.count("--threads") == 0)
      *app_threads_ = 1;
    if (observe_ != nullptr && parallel.quiet()) *observe_ = {};
  } catch (const CLI::CallForHelp&) {
    if (!parallel.quiet()) std::cout << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    if (!parallel.quiet()) std::cerr << name << ": " << e.what() << " (see --help)\n";
    return 2;
  }
  return std::nullopt;
}

void Program::print_processes(std::size_t batch, const std::string& items, int zero) const {
  if (!parallel.active() || parallel.quiet()) return;
  std::printf("%s: %d processes, %zu %s of each batch of %zu per process%s\n", name.c_str(),
              parallel.size(), batch / static_cast<std::size_t>(parallel.size()), items.c_str(),
              batch,
              zero == 0   ? ""
              : zero == 1 ? "; ZeRO stage 1 (optimizer state sharded)"
                          : "; ZeRO stage 2 (optimizer state and gradients sharded)");
}

int Program::fail(const std::string& what, int code) {
  parallel.fail(name + ": " + what);  // ends the whole job under mpirun
  std::cerr << name << ": " << what << "\n";
  return code;
}

}  // namespace demos
