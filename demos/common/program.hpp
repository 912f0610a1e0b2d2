#pragma once
// demos::Program: what every training demo's main() does around its own
// work. It joins the MPI job under mpirun (training::Parallel: rank 0 alone
// prints and writes), holds the command line (CLI11) with the options the
// demos share, parses it (--help: exit 0; a bad option: one line on stderr
// and exit 2) and runs the demo, turning an exception into one line
// "<program>: <what>" on stderr, the exit code and, under mpirun, the end of
// the whole job.
//
//   int main(int argc, char** argv) {
//     demos::Program program(argc, argv, "train_x", "Train x on y");
//     Options o;
//     program.app.add_option("--steps", o.steps, "optimizer steps")->capture_default_str();
//     program.add_out(o.out);
//     if (const auto code = program.parse(argc, argv)) return *code;
//     return program.run([&] { return train_and_report(o, program.parallel); });
//   }

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <xtgrad/training/data_parallel.hpp>
#include <xtgrad/training/step_observer.hpp>
#include <xtgrad/training/training_state.hpp>

namespace demos {

// The options of a training demo besides its model's and its loop's.
struct AppOptions {
  int threads = 2;                // --threads
  std::string precision = "f32";  // --precision
  std::string out;                // --out
  std::string data_dir;           // --data-dir
};

// Adds the numbers of `values` (a JSON object: the options struct's to_json)
// to a run's saved identity (training/run_state.hpp) as "<prefix><name>":
// whole numbers and booleans (1, 0) as integers, an unsigned one by its bits
// (training::seed_bits), the others as reals.
void add_extras(xtgrad::TrainingExtras& extras, const std::string& prefix,
                const nlohmann::json& values);

// A demo's data could not be used (its files missing, malformed or
// inconsistent); Program::run takes it for bad input.
struct DataError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Program {
 public:
  Program(int& argc, char**& argv, std::string name, const std::string& description);

  xtgrad::training::Parallel parallel;  // the MPI job under mpirun, else nothing
  CLI::App app;
  const std::string name;

  // --name (its default shown in --help) checked by `check` (CLI::Range, CLI::IsMember, ...).
  template <class V>
  CLI::Option* add(const std::string& name, V& value, const std::string& help,
                   const CLI::Validator& check) {
    return app.add_option(name, value, help)->capture_default_str()->check(check);
  }
  // --name with its default shown, unchecked.
  template <class V>
  CLI::Option* add(const std::string& name, V& value, const std::string& help) {
    return app.add_option(name, value, help)->capture_default_str();
  }

  // The shared options, each with its demo's help text where they differ.
  void add_out(std::string& out);                           // --out DIR, "output directory"
  void add_threads(int& threads, const std::string& help);  // --threads, 1 to 256
  // --save DIR and --resume DIR (an existing directory).
  void add_save_resume(std::filesystem::path& save, std::filesystem::path& resume,
                       const std::string& save_help);
  // --stop-after N of a run of --<steps> <unit>s, 1 to max.
  void add_stop_after(std::size_t& stop_after, const std::string& unit, const std::string& steps,
                      int max);
  // --zero 0|1|2; `stages` says what each stage is, the rest of the text is shared.
  void add_zero(int& zero, const std::string& stages);
  // --graph FILE, --profile, --profile-steps, --profile-sort, --profile-csv,
  // --profile-json (training::StepObserver); under mpirun rank 0 alone observes.
  void add_observer(xtgrad::training::StepObserverOptions& o);
  // --precision f32|bf16: how float GEMMs compute (xtgrad::set_matmul_precision;
  // f32 is MatmulPrecision::highest).
  void add_precision(std::string& precision);

  // --threads, --precision, --out and --data-dir (each default shown); under
  // mpirun one OpenBLAS thread per process, unless --threads was given.
  void add_app(AppOptions& o, const std::string& threads_help, const std::string& data_help);
  // The start of the run: xtgrad::set_num_threads(o.threads), then
  // start_compute(o.precision); seconds() counts from here.
  void start(const AppOptions& o);
  double seconds() const;

  // Sets the matmul precision `precision` names (--precision; bf16 where it
  // cannot run: std::invalid_argument saying why), turns weight packing on,
  // and prints, on rank 0, the
  // machine line "<name>: <xtgrad::compute_info()>". Call it after
  // xtgrad::set_num_threads.
  void start_compute(const std::string& precision) const;

  // Parses the command line, then runs `check` (which may throw
  // CLI::ValidationError, or set the defaults that depend on other options) and applies the mpirun rules of add_app and
  // add_observer. nullopt to go on; otherwise the exit code: 0 after --help,
  // 2 after a bad option.
  std::optional<int> parse(int argc, char** argv, const std::function<void()>& check = {});

  // Under mpirun (rank 0): "<name>: <P> processes, <batch / P> <items> of
  // each batch of <batch> per process" and the ZeRO stage.
  void print_processes(std::size_t batch, const std::string& items, int zero) const;

  // Runs `body` and returns its exit code. An exception prints
  // "<name>: <what>" and exits 2 for bad input (std::invalid_argument,
  // DataError: the demo's bad data) and 1 otherwise, or 1 for every
  // exception when bad_input_exits_2 is false.
  int run(const std::function<int()>& body, bool bad_input_exits_2 = true) {
    try {
      return body();
    } catch (const DataError& e) {
      return fail(e.what(), bad_input_exits_2 ? 2 : 1);
    } catch (const std::invalid_argument& e) {
      return fail(e.what(), bad_input_exits_2 ? 2 : 1);
    } catch (const std::exception& e) {
      return fail(e.what(), 1);
    }
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  int* app_threads_ = nullptr;                                // add_app's --threads
  xtgrad::training::StepObserverOptions* observe_ = nullptr;  // add_observer's
  int fail(const std::string& what, int code);
};

}  // namespace demos
