// The bad-input table of the files: .npy files, Module::save and Module::load,
// and checkpoints from other machines or made hostile (the machinery is in
// tests/support/bad_input.hpp).

#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include <xtensor/xtensor.hpp>
#include <xtgrad/engine/engine.hpp>
#include <xtgrad/io/io.hpp>
#include <xtgrad/modules/modules.hpp>
#include <xtgrad/optim/optim.hpp>
#include <xtgrad/training/training_state.hpp>

#include "support/bad_input.hpp"
#include "support/npy_bytes.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;
namespace fs = std::filesystem;

// ---------------------------------------------------------------- npy

TEST_CASE_TEMPLATE("bad input: npy files", T, float, double) {
  TempDir dir("bad-npy");
  using Other = std::conditional_t<std::is_same_v<T, float>, double, float>;
  save_npy(dir / "other.npy", xt::xarray<Other>{1, 2});
  const xt::xarray<T> many_axes = xt::zeros<T>(std::vector<std::size_t>(65, 1));
  auto snapshot = [&] {
    State s;
    for (const std::string& name : directory_listing(dir.path())) s.add(name);
    return s;
  };
  const std::vector<Row> rows = {
      {"load_npy: a missing file",
       [&] { load_npy<T>(dir / "absent.npy"); },
       Expect::runtime_error,
       {"load_npy", "absent.npy", "cannot open", "No such file"}},
      {"load_npy: a directory",
       [&] { load_npy<T>(dir.path()); },
       Expect::runtime_error,
       {"load_npy", "Is a directory"}},
      {"load_npy: the other dtype",
       [&] { load_npy<T>(dir / "other.npy"); },
       Expect::invalid_argument,
       {"load_npy", "other.npy", "has dtype", std::string("expected ") + npy_dtype_name<T>()}},
      {"read_npy_header: a missing file",
       [&] { read_npy_header(dir / "absent.npy"); },
       Expect::runtime_error,
       {"read_npy_header", "absent.npy"}},
      {"save_npy: a directory path",
       [&] { save_npy(dir.path() / "", xt::xarray<T>{1}); },
       Expect::invalid_argument,
       {"save_npy", "names a directory", "expected a file path"}},
      {"save_npy: into a missing directory",
       [&] { save_npy(dir / "no" / "x.npy", xt::xarray<T>{1}); },
       Expect::runtime_error,
       {"save_npy", "cannot create"}},
      {"save_npy: more axes than .npy allows",
       [&] { save_npy(dir / "deep.npy", many_axes); },
       Expect::invalid_argument,
       {"save_npy", "65 dimensions", "at most 64"}},
  };
  report("npy", run_rows(rows, snapshot));
}

// ---------------------------------------------------------------- save and load

TEST_CASE_TEMPLATE("bad input: Module::save and Module::load", T, float, double) {
  Linear<T> lin(3, 4);
  FeedForward<T> ff(4, 8);
  Tape<T> tape;
  Var<T> x3 = tape.leaf(random_array<T>({2, 3}, 1));
  Var<T> x4 = tape.leaf(random_array<T>({2, 4}, 2));
  tape.backward(sum(lin(x3)) + sum(ff(x4)));  // gradients everywhere

  TempDir dir("bad-input");
  const fs::path ckpt = dir / "ckpt";
  lin.save(ckpt);
  // Version 1 (no config), so that names and shapes are what is checked.
  const Linear<T> wide(3, 5);
  save_checkpoint(dir / "wide", wide.named_parameters());
  save_checkpoint(dir / "ff", std::as_const(ff).named_parameters());
  save_checkpoint(dir / "lin_v1", std::as_const(lin).named_parameters());
  Linear<T>(3, 5).save(dir / "wide_v2");
  Linear<T>(3, 4).save(dir / "lin.safetensors");
  using Other = std::conditional_t<std::is_same_v<T, float>, double, float>;
  Linear<Other>(3, 4).save(dir / "other_dtype");
  fs::create_directory(dir / "empty");
  std::ofstream(dir / "file") << "not a checkpoint";

  auto snapshot = [&] {
    State s;
    for (Module<T>* m : std::vector<Module<T>*>{&lin, &ff})
      for (Parameter<T>* p : m->parameters()) s.add(*p);
    for (const std::string& name : directory_listing(dir.path())) s.add(name);
    return s;
  };
  std::vector<Row> rows;
  const auto IA = Expect::invalid_argument;
  const auto RE = Expect::runtime_error;
  const auto bad = row_adder(rows);

  // save and load (the hostile-file cases are in test_module.cpp and test_npy.cpp)
  bad("save: empty path", [&] { lin.save(""); }, IA, {"Module::save", "path is empty"});
  bad("save: onto a file", [&] { lin.save(dir / "file"); }, IA,
      {"Module::save", "file", "not a directory"});
  bad("save: into a missing parent", [&] { lin.save(dir / "no" / "such"); }, RE,
      {"Module::save", "cannot create"});
  bad("load: a missing directory", [&] { lin.load(dir / "absent"); }, RE,
      {"Module::load", "absent", "No such file"});
  bad("load: a file", [&] { lin.load(dir / "file"); }, IA, {"Module::load", "not a directory"});
  bad("load: an empty directory", [&] { lin.load(dir / "empty"); }, IA,
      {"Module::load", "has no manifest.tsv"});
  bad("load: another shape", [&] { lin.load(dir / "wide"); }, IA,
      {"Module::load", "parameter 'weight'", "[5, 3]", "expects [4, 3]"});
  bad("load: another module", [&] { lin.load(dir / "ff"); }, IA,
      {"Module::load", "missing parameter(s) 'weight', 'bias'", "unexpected parameter(s)"});
  bad("load: a version 1 Linear checkpoint into a FeedForward", [&] { ff.load(dir / "lin_v1"); },
      IA, {"Module::load", "missing parameter(s) 'w1.weight'"});
  bad("load: the other dtype", [&] { lin.load(dir / "other_dtype"); }, IA,
      {"Module::load", "parameter 'weight'", "stores float", "does not convert"});
  bad("load: another configuration", [&] { lin.load(dir / "wide_v2"); }, IA,
      {"Module::load", "holds Linear(in_features=3, out_features=5, bias=true)",
       "this module is Linear(in_features=3, out_features=4, bias=true)"});
  bad("load: a checkpoint of another type", [&] { ff.load(ckpt); }, IA,
      {"Module::load", "holds Linear(", "this module is FeedForward(d_model=4"});
  bad("load: a safetensors checkpoint of another type", [&] { ff.load(dir / "lin.safetensors"); },
      IA, {"Module::load", "lin.safetensors", "holds Linear(", "this module is FeedForward("});
  bad("load: a missing safetensors file", [&] { lin.load(dir / "absent.safetensors"); }, RE,
      {"read_safetensors", "absent.safetensors"});
  bad("save: a safetensors file into a missing directory",
      [&] { lin.save(dir / "no" / "m.safetensors"); }, RE, {"write_safetensors", "cannot create"});

  report("save and load", run_rows(rows, snapshot));
}

// ---------------------------------------------------------------- untrusted checkpoints

// Checkpoints from another machine or made hostile: what test_module.cpp and
// test_npy.cpp do not cover.
namespace {

fs::path corpus_file(const std::string& name) {
  return fs::path(XTGRAD_SOURCE_DIR) / "tests" / "hardening" / "fuzz" / "corpus" / "npy" / name;
}

template <class T>
std::vector<xt::xarray<T>> values_of(Module<T>& m) {
  std::vector<xt::xarray<T>> out;
  for (Parameter<T>* p : m.parameters()) out.push_back(p->value);
  return out;
}

}  // namespace

TEST_CASE("bad input: a checkpoint from a big-endian machine, in Fortran order, loads converted") {
  // Files as numpy writes them elsewhere: weight '>f8' Fortran-order [[1, 2, 3], [4, 5, 6]],
  // bias '>f8' [1.5, -2] (tests/hardening/fuzz/corpus/npy, written byte by byte).
  TempDir dir("foreign");
  const fs::path ckpt = dir / "ckpt";
  Linear<double> source(3, 2);
  source.save(ckpt);
  fs::copy_file(corpus_file("f8_big_endian_fortran_2x3.npy"), ckpt / "weight.npy",
                fs::copy_options::overwrite_existing);
  fs::copy_file(corpus_file("f8_big_endian.npy"), ckpt / "bias.npy",
                fs::copy_options::overwrite_existing);
  Linear<double> m(3, 2);
  m.load(ckpt);
  CHECK(m.weight.value == xt::xarray<double>{{1, 2, 3}, {4, 5, 6}});
  CHECK(m.bias.value == xt::xarray<double>{1.5, -2});
  // The same bytes into a float32 module are refused, not converted.
  Linear<float> single(3, 2);
  const auto before = values_of(single);
  CHECK_THROWS_WITH_PARTS(single.load(ckpt), std::invalid_argument,
                          {"Module::load", "parameter 'weight'", "stores float64"});
  CHECK(values_of(single) == before);
}

TEST_CASE("bad input: a checkpoint declaring a huge shape is refused before anything is read") {
  TempDir dir("huge");
  const fs::path ckpt = dir / "ckpt";
  Linear<float> m(3, 4);
  m.save(ckpt);
  std::string manifest = read_file(ckpt / "manifest.tsv");
  const std::size_t at = manifest.find("4x3");
  REQUIRE(at != std::string::npos);
  manifest.replace(at, 3, "1000000000x1000000000");
  std::ofstream(ckpt / "manifest.tsv", std::ios::trunc) << manifest;
  const auto before = values_of(m);
  CHECK_THROWS_WITH_PARTS(m.load(ckpt), std::invalid_argument,
                          {"Module::load", "parameter 'weight'", "[1000000000, 1000000000]",
                           "the module expects [4, 3]"});
  CHECK(values_of(m) == before);
}

TEST_CASE("bad input: a checkpoint entry that is not a regular file fails without blocking") {
  TempDir dir("special");
  const fs::path ckpt = dir / "ckpt";
  Linear<float> m(3, 4);
  m.save(ckpt);
  const auto before = values_of(m);
  const fs::path bias = ckpt / "bias.npy";

  SUBCASE("a directory") {
    fs::remove(bias);
    fs::create_directory(bias);
    CHECK_THROWS_WITH_PARTS(m.load(ckpt), std::runtime_error,
                            {"Module::load", "parameter 'bias'", "bias.npy", "Is a directory"});
  }
  SUBCASE("a symbolic link to a character device") {
    fs::remove(bias);
    fs::create_symlink("/dev/zero", bias);
    CHECK_THROWS_WITH_PARTS(m.load(ckpt), std::runtime_error,
                            {"Module::load", "parameter 'bias'", "bias.npy"});
  }
  SUBCASE("a FIFO nobody writes to") {
    // Opening a FIFO for reading blocks until a writer appears: a hostile
    // checkpoint must not be able to hang load(). If it does hang, this
    // test opens the FIFO for writing itself (which releases the reader),
    // then reports the hang.
    fs::remove(bias);
    REQUIRE(::mkfifo(bias.c_str(), 0600) == 0);
    auto outcome = std::async(std::launch::async, [&]() -> std::string {
      try {
        m.load(ckpt);
        return "loaded";
      } catch (const std::exception& e) {
        return std::string(typeid(e) == typeid(std::runtime_error) ? "runtime_error: "
                                                                   : "other: ") +
               e.what();
      }
    });
    const bool hung = outcome.wait_for(std::chrono::seconds(5)) == std::future_status::timeout;
    if (hung) {
      const int fd = ::open(bias.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) ::close(fd);
    }
    CHECK_MESSAGE(!hung, "Module::load blocked opening a FIFO");
    const std::string what = outcome.get();
    INFO(what);
    CHECK(what.rfind("runtime_error: ", 0) == 0);
    CHECK(what.find("bias.npy") != std::string::npos);
  }
  CHECK(values_of(m) == before);
}

// ---------------------------------------------------------------- training-state directories

TEST_CASE_TEMPLATE("bad input: training-state directories", T, float, double) {
  using Other = std::conditional_t<std::is_same_v<T, float>, double, float>;
  TempDir dir("bad-state");
  const std::string descr = std::is_same_v<T, float> ? "<f4" : "<f8";
  StateDict<T> good;
  good.arrays["a"] = xt::xarray<T>{1, 2};
  good.integers["step"] = 3;
  // A directory from `good` with `scalars` as scalars.tsv ("" for none).
  const auto variant = [&](const std::string& name, const std::string& scalars) {
    save_state_directory(dir / name, good);
    if (scalars.empty())
      fs::remove(dir / name / "scalars.tsv");
    else
      write_file(dir / name / "scalars.tsv", scalars);
    return dir / name;
  };
  const std::string magic = "xtgrad-scalars 1\n";
  variant("good", magic + "int64\tstep\t3\n");
  variant("no_scalars", "");
  variant("bad_magic", "xtgrad-scalars 2\n");
  variant("bad_kind", magic + "int32\tstep\t3\n");
  variant("two_fields", magic + "int64\tstep\n");
  variant("overflow", magic + "int64\tstep\t9223372036854775808\n");
  variant("not_an_integer", magic + "int64\tstep\t3.0\n");
  variant("not_a_number", magic + "float64\tlr\t0.1x\n");
  variant("twice", magic + "float64\tlr\t0.1\nfloat64\tlr\t0.2\n");
  variant("bad_name", magic + "int64\t../step\t3\n");
  variant("control", magic + "string\ttype\tAd\x01am\n");
  const fs::path scalars_dir = variant("scalars_dir", "");
  fs::create_directory(scalars_dir / "scalars.tsv");
  const fs::path other_dtype = dir / "other_dtype";
  StateDict<Other> other;
  other.arrays["a"] = xt::xarray<Other>{1, 2};
  save_state_directory(other_dtype, other);
  const fs::path lying = variant("lying_header", magic);
  write_file(lying / "a.npy", npy_file(npy_dict(descr, "(3,)"), std::string(3 * sizeof(T), 0)));
  const fs::path huge = variant("huge", magic);
  write_file(huge / "manifest.tsv", "xtgrad-checkpoint 1\na\t" + std::string(npy_dtype_name<T>()) +
                                        "\t4294967296x4294967296x4294967296\ta.npy\n");
  fs::create_directory(dir / "empty");
  write_file(dir / "file", "not a directory");
  fs::create_directory(dir / "not_state");
  write_file(dir / "not_state" / "notes.txt", "someone's files");

  auto snapshot = [&] {
    State s;
    for (const std::string& name : directory_listing(dir.path())) s.add(name);
    return s;
  };
  std::vector<Row> rows;
  const auto IA = Expect::invalid_argument;
  const auto RE = Expect::runtime_error;
  const auto bad = row_adder(rows);
  const auto load = [&](const std::string& name) {
    return [&dir, name] { load_state_directory<T>(dir / name, 1 << 20); };
  };
  const std::string fn = "load_state_directory";
  bad("a missing directory", load("absent"), RE, {fn, "absent", "No such file"});
  bad("a file", load("file"), IA, {fn, "not a directory"});
  bad("an empty directory", load("empty"), IA, {fn, "has no manifest.tsv"});
  bad("no scalars.tsv", load("no_scalars"), IA, {fn, "has no scalars.tsv"});
  bad("scalars.tsv: another version", load("bad_magic"), IA,
      {fn, "first line is 'xtgrad-scalars 2'", "expected 'xtgrad-scalars 1'"});
  bad("scalars.tsv: an unknown kind", load("bad_kind"), IA,
      {fn, "line 2", "kind 'int32'", "int64, float64 or string"});
  bad("scalars.tsv: two fields", load("two_fields"), IA,
      {fn, "line 2", "3 tab-separated fields", "'int64\\tstep'"});
  bad("scalars.tsv: an int64 overflow", load("overflow"), IA,
      {fn, "'9223372036854775808'", "decimal integer"});
  bad("scalars.tsv: a real as an int64", load("not_an_integer"), IA, {fn, "'3.0'"});
  bad("scalars.tsv: trailing garbage after a real", load("not_a_number"), IA,
      {fn, "float64 'lr'", "'0.1x'", "expected a decimal number"});
  bad("scalars.tsv: a name twice", load("twice"), IA, {fn, "line 3", "'lr' is listed twice"});
  bad("scalars.tsv: a name with '/'", load("bad_name"), IA, {fn, "name '../step'"});
  bad("scalars.tsv: a control character", load("control"), IA,
      {fn, "string 'type'", "control character"});
  bad("scalars.tsv: a directory", load("scalars_dir"), RE, {fn, "Is a directory"});
  bad("the other dtype", load("other_dtype"), IA,
      {fn, "array 'a'", std::string("is ") + npy_dtype_name<Other>(), "does not convert"});
  bad("a .npy header that disagrees with the manifest", load("lying_header"), IA,
      {fn, "array 'a'", "holds shape [3]", "the manifest says [2]"});
  bad("a declared size beyond memory", load("huge"), IA,
      {fn, "more bytes than memory can hold", "more than the 1048576"});
  bad("arrays above the limit", [&] { load_state_directory<T>(dir / "good", 2 * sizeof(T) - 1); },
      IA, {fn, "declares arrays of " + std::to_string(2 * sizeof(T)) + " bytes in all"});
  bad("save: onto a file", [&] { save_state_directory(dir / "file", good); }, IA,
      {"save_state_directory", "not a directory"});
  bad("save: over a directory that is not a checkpoint",
      [&] { save_state_directory(dir / "not_state", good); }, IA,
      {"save_state_directory", "not an xtgrad checkpoint"});
  StateDict<T> bad_scalar = good;
  bad_scalar.reals[".hidden"] = 1.0;
  bad("save: a hidden scalar name", [&] { save_state_directory(dir / "new", bad_scalar); }, IA,
      {"save_state_directory", "scalar name '.hidden'"});
  CHECK_NOTHROW(load_state_directory<T>(dir / "good", 2 * sizeof(T)));
  report("training-state directories", run_rows(rows, snapshot));
}

TEST_CASE_TEMPLATE("bad input: load_training_state is all or nothing", T, float, double) {
  TempDir dir("bad-training");
  Linear<T> model(3, 2);
  optim::AdamW<T> adamw(model.parameters(), optim::AdamWOptions(0.1));
  optim::StepLR<T> step_lr(adamw, 2);
  for (Parameter<T>* p : model.parameters()) {
    p->grad = xt::ones_like(p->value);
    p->has_grad = true;
  }
  adamw.step();
  step_lr.step();
  save_training_state(dir / "good", model, adamw, &step_lr, {{{"step", 1}}, {}});
  save_training_state(dir / "no_schedule", model, adamw, nullptr);
  Linear<T> wide(3, 5);
  optim::AdamW<T> wide_adamw(wide.parameters());
  save_training_state(dir / "wide", wide, wide_adamw, nullptr);
  optim::SGD<T> sgd(model.parameters(), optim::SGDOptions(0.1).momentum(0.9));
  optim::StepLR<T> sgd_step_lr(sgd, 2);
  save_training_state(dir / "sgd", model, sgd, &sgd_step_lr);
  Linear<T> no_bias(3, 2, false);
  optim::AdamW<T> no_bias_adamw(no_bias.parameters());
  save_training_state(dir / "no_bias", no_bias, no_bias_adamw, nullptr);
  // Without the model's config (as written before configs were recorded), so
  // that the names and shapes are what is checked; or with a config that is
  // not JSON.
  const auto set_config = [&](const std::string& from, const std::string& to,
                              const std::string* config) {
    StateDict<T> state = load_state_directory<T>(dir / from, 1 << 20);
    state.strings.erase("model.config");
    if (config) state.strings["model.config"] = *config;
    save_state_directory(dir / to, state);
  };
  set_config("wide", "wide_no_config", nullptr);
  set_config("no_bias", "no_bias", nullptr);
  const std::string not_json = "Linear(3, 2)";
  set_config("good", "config_not_json", &not_json);
  StateDict<T> foreign = load_state_directory<T>(dir / "good", 1 << 20);
  foreign.integers["trainer.step"] = 1;
  save_state_directory(dir / "foreign", foreign);
  StateDict<T> corrupt = load_state_directory<T>(dir / "good", 1 << 20);
  corrupt.arrays["optimizer.state.0.exp_avg"] = xt::zeros<T>({7});
  save_state_directory(dir / "corrupt_optimizer", corrupt);

  // What a load into fresh objects may change, if it fails: nothing.
  Linear<T> fresh(3, 2, true, detail::lvalue(Generator(5)));
  optim::AdamW<T> fresh_adamw(fresh.parameters(), optim::AdamWOptions(0.5));
  optim::StepLR<T> fresh_step_lr(fresh_adamw, 2);
  optim::CosineAnnealingLR<T> fresh_cosine(fresh_adamw, 5);
  auto snapshot = [&] {
    State s;
    for (Parameter<T>* p : fresh.parameters()) s.add(*p);
    s.add(fresh_adamw.lr());
    s.add(std::string(fresh_adamw.state(0) ? "state" : "no state"));
    s.add(static_cast<std::size_t>(fresh_step_lr.last_epoch()));
    s.add(static_cast<std::size_t>(fresh_cosine.last_epoch()));
    return s;
  };
  std::vector<Row> rows;
  const auto IA = Expect::invalid_argument;
  const auto bad = row_adder(rows);
  const auto load = [&](const std::string& name, optim::LRScheduler<T>* schedule) {
    return [&, name, schedule] { load_training_state(dir / name, fresh, fresh_adamw, schedule); };
  };
  const std::string fn = "load_training_state";
  bad("another model's configuration", load("wide", nullptr), IA,
      {fn,
       "holds Linear(in_features=3, out_features=5, bias=true), this module is "
       "Linear(in_features=3, out_features=2, bias=true)"});
  bad("a model config that is not JSON", load("config_not_json", &fresh_step_lr), IA,
      {fn, "'model.config': module config is not valid JSON"});
  bad("another model's shapes, no config recorded", load("wide_no_config", nullptr), IA,
      {fn, "'model.weight' has shape [5, 3]", "the model expects [2, 3]"});
  bad("a model without a parameter, no config recorded", load("no_bias", nullptr), IA,
      {fn, "has no array 'model.bias'"});
  bad("another optimizer", load("sgd", &fresh_step_lr), IA,
      {"AdamW::check_state_dict", "'type' = 'SGD'", "expected 'AdamW'"});
  bad("a corrupt optimizer part", load("corrupt_optimizer", &fresh_step_lr), IA,
      {"AdamW::check_state_dict", "'state.0.exp_avg' has shape [7], expected [2, 3]"});
  bad("a schedule's state without a schedule", load("good", nullptr), IA,
      {fn, "holds the state of a schedule, but none was given"});
  bad("a schedule without its state", load("no_schedule", &fresh_step_lr), IA,
      {fn, "holds no schedule state, but a StepLR was given"});
  bad("another schedule", load("good", &fresh_cosine), IA,
      {"CosineAnnealingLR::check_state_dict", "'StepLR'", "expected 'CosineAnnealingLR'"});
  bad("an entry of no known part", load("foreign", &fresh_step_lr), IA,
      {fn, "'trainer.step'", "does not start with model., optimizer., scheduler. or extra."});
  report("load_training_state", run_rows(rows, snapshot));
  CHECK(load_training_state(dir / "good", fresh, fresh_adamw, &fresh_step_lr).integers.at("step") ==
        1);
}

// ---------------------------------------------------------------- module configs in checkpoints

TEST_CASE_TEMPLATE("bad input: hostile module configs in checkpoints", T, float, double) {
  TempDir dir("bad-config");
  Linear<T> lin(2, 3);
  lin.save(dir / "good");
  const std::string manifest = read_file(dir / "good" / "manifest.tsv");
  const std::size_t line2 = manifest.find('\n') + 1, line3 = manifest.find('\n', line2) + 1;
  const std::string entries = manifest.substr(line3);
  const std::string good_json =
      "{\"type\":\"Linear\",\"options\":{\"in_features\":\"2\",\"out_features\":\"3\","
      "\"bias\":\"true\"}}";
  REQUIRE(manifest.substr(line2, line3 - line2) == "module\t" + good_json + "\n");
  // A copy of the good checkpoint with `head` in place of its first two lines.
  const auto directory = [&](const std::string& name, const std::string& head) {
    fs::copy(dir / "good", dir / name);
    write_file(dir / name / "manifest.tsv", head + entries);
    return dir / name;
  };
  const auto with_config = [&](const std::string& name, const std::string& json) {
    return directory(name, "xtgrad-checkpoint 2\nmodule\t" + json + "\n");
  };
  const TensorMap tensors = to_tensor_map(lin);
  const auto file = [&](const std::string& name, const SafetensorsMetadata& metadata) {
    write_safetensors(dir / name, tensors, metadata);
    return dir / name;
  };
  const SafetensorsMetadata good_metadata = read_safetensors([&] {
                                              lin.save(dir / "good.safetensors");
                                              return dir / "good.safetensors";
                                            }())
                                                .metadata;
  const auto metadata_with = [&](const std::string& key, const std::string& value) {
    SafetensorsMetadata m = good_metadata;
    m[key] = value;
    return m;
  };
  const auto metadata_without = [&](const std::string& key) {
    SafetensorsMetadata m = good_metadata;
    m.erase(key);
    return m;
  };
  std::string deep = good_json;
  for (int i = 0; i < 200; ++i) deep = "[" + deep + "]";
  deep = "{\"type\":\"Linear\",\"options\":{},\"children\":[[\"0\"," + deep + "]]}";

  const fs::path no_module_line = directory("no_module_line", "xtgrad-checkpoint 2\n");
  const fs::path version_3 = directory("version_3", "xtgrad-checkpoint 3\n");
  const fs::path not_json = with_config("not_json", "{\"type\":");
  const fs::path no_type = with_config("no_type", "{\"options\":{}}");
  const fs::path empty_type = with_config("empty_type", "{\"type\":\"\",\"options\":{}}");
  const fs::path unknown_key =
      with_config("unknown_key", "{\"type\":\"Linear\",\"options\":{},\"x\":1}");
  const fs::path twice = with_config("twice", "{\"type\":\"Linear\",\"type\":\"Linear\"}");
  const fs::path number_option =
      with_config("number_option", "{\"type\":\"Linear\",\"options\":{\"in_features\":2}}");
  const fs::path deep_dir = with_config("deep", deep);
  const fs::path bad_child =
      with_config("bad_child", "{\"type\":\"S\",\"options\":{},\"children\":[[\"0\"]]}");
  const fs::path twin_child = with_config(
      "twin_child",
      "{\"type\":\"S\",\"options\":{},\"children\":[[\"0\",{\"type\":\"A\",\"options\":{}}],"
      "[\"0\",{\"type\":\"A\",\"options\":{}}]]}");
  const fs::path control = with_config("control", "{\"type\":\"Lin\\u0001ear\",\"options\":{}}");
  // A NUL byte after the JSON would end nlohmann's input there and hide what follows.
  const std::string hidden = std::string("\0", 1) + "{\"type\":\"Other\"}";
  const std::string nul_at = "byte " + std::to_string(good_json.size());
  const fs::path nul_after = with_config("nul_after", good_json + hidden);
  const fs::path trailing = with_config("trailing", good_json + " {}");

  const fs::path torch_file = file("torch.safetensors", {{"format", "pt"}});
  const fs::path version_1 = file("v1.safetensors", metadata_with("xtgrad.version", "1"));
  const fs::path no_type_file = file("no_type.safetensors", metadata_without("xtgrad.type"));
  const fs::path no_config_file = file("no_config.safetensors", metadata_without("xtgrad.config"));
  const fs::path not_json_file =
      file("not_json.safetensors", metadata_with("xtgrad.config", "Linear(2, 3)"));
  const fs::path array_file = file("array.safetensors", metadata_with("xtgrad.config", "[1]"));
  const fs::path other_type_file =
      file("other_type.safetensors", metadata_with("xtgrad.type", "FeedForward"));
  const fs::path nul_after_file =
      file("nul_after.safetensors", metadata_with("xtgrad.config", good_json + hidden));

  auto snapshot = [&] {
    State s;
    for (Parameter<T>* p : lin.parameters()) s.add(*p);
    for (const std::string& name : directory_listing(dir.path())) s.add(name);
    return s;
  };
  std::vector<Row> rows;
  const auto IA = Expect::invalid_argument;
  const auto bad = row_adder(rows);
  const auto load = [&](const fs::path& path) { return [&lin, path] { lin.load(path); }; };
  bad("manifest: version 2 without its module line", load(no_module_line), IA,
      {"Module::load", "line 2", "expected 'module', a tab and the module's config"});
  bad("manifest: an unknown version", load(version_3), IA,
      {"first line is 'xtgrad-checkpoint 3'",
       "expected 'xtgrad-checkpoint 1' or "
       "'xtgrad-checkpoint 2'"});
  bad("config: not JSON", load(not_json), IA,
      {"Module::load", "manifest.tsv' line 2: module config is not valid JSON"});
  bad("config: no type", load(no_type), IA, {"line 2: module config has no \"type\""});
  bad("config: an empty type", load(empty_type), IA,
      {"module config has a \"type\" that is not a non-empty string"});
  bad("config: an unknown key", load(unknown_key), IA,
      {"module config has the unknown key 'x'", "expected type, options and children"});
  bad("config: a key twice", load(twice), IA, {"module config has the key 'type' twice"});
  bad("config: an option that is not a string", load(number_option), IA,
      {"module config option 'in_features' is not a string"});
  bad("config: nested 200 levels deep", load(deep_dir), IA,
      {"module config is nested more than 128 levels deep"});
  bad("config: a child that is not a pair", load(bad_child), IA,
      {"module config has a child that is not a [name, config] pair"});
  bad("config: a child name twice", load(twin_child), IA,
      {"module config has the child '0' twice"});
  bad("config: another type, control characters escaped", load(control), IA,
      {"holds Lin\\x01ear(), this module is Linear("});
  bad("config: a NUL byte after the JSON", load(nul_after), IA,
      {"Module::load",
       "manifest.tsv' line 2: module config " + nul_at + " is a NUL byte, expected JSON text"});
  bad("config: more JSON after the JSON", load(trailing), IA,
      {"line 2: module config is not valid JSON", "expected end of input"});
  bad("safetensors: a NUL byte after the config's JSON", load(nul_after_file), IA,
      {"nul_after.safetensors' xtgrad.config: module config " + nul_at +
       " is a NUL byte, expected JSON text"});
  bad("safetensors: a file without xtgrad metadata", load(torch_file), IA,
      {"Module::load", "torch.safetensors", "has no 'xtgrad.version'",
       "module.load_state_dict(read_safetensors(path))"});
  bad("safetensors: an unknown version", load(version_1), IA,
      {"has format version '1', expected '2'"});
  bad("safetensors: no type", load(no_type_file), IA, {"has no 'xtgrad.type'"});
  bad("safetensors: no config", load(no_config_file), IA, {"has no 'xtgrad.config'"});
  bad("safetensors: a config that is not JSON", load(not_json_file), IA,
      {"not_json.safetensors' xtgrad.config: module config is not valid JSON"});
  bad("safetensors: a config that is not an object", load(array_file), IA,
      {"module config is not a JSON object"});
  bad("safetensors: a type the config does not hold", load(other_type_file), IA,
      {"xtgrad.type is 'FeedForward' but xtgrad.config holds a 'Linear'"});
  report("module configs", run_rows(rows, snapshot));
}
