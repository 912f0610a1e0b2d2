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
#include <xtgrad/modules/modules.hpp>

#include "support/bad_input.hpp"
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
  Linear<T>(3, 5).save(dir / "wide");
  ff.save(dir / "ff");
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
  bad("load: a Linear checkpoint into a FeedForward", [&] { ff.load(ckpt); }, IA,
      {"Module::load", "missing parameter(s) 'w1.weight'"});
  bad("load: the other dtype", [&] { lin.load(dir / "other_dtype"); }, IA,
      {"Module::load", "parameter 'weight'", "stores float", "does not convert"});

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
