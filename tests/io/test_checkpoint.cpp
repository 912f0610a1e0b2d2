// Checkpoint directories (io/checkpoint.hpp) through Module::save and
// Module::load, and save_checkpoint / load_checkpoint directly: the format,
// the atomic save, the all-or-nothing load, and hostile directories.

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <future>
#include <limits>
#include <stdexcept>
#include <string>
#include <typeinfo>
#include <vector>

#include <xtgrad/engine/errors.hpp>
#include <xtgrad/io/checkpoint.hpp>
#include <xtgrad/io/npy.hpp>
#include <xtgrad/modules/module.hpp>

#include "support/file_size_limit.hpp"
#include "support/module_fixtures.hpp"
#include "support/npy_bytes.hpp"
#include "support/peak_memory.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using testing::bit_equal;
using testing::directory_names;
using testing::FileSizeLimit;
using testing::npy_dict;
using testing::npy_file;
using testing::peak_rss_bytes;
using testing::read_file;
using testing::snapshot;
using testing::TempDir;
using testing::TestComposite;
using testing::TestLeaf;
using testing::write_file;
namespace fs = std::filesystem;

namespace {

// A small parameter, then a large one: a save that fails on the second file
// has already written the first.
template <class T>
class TestSmallThenLarge : public Module<T> {
 public:
  explicit TestSmallThenLarge(std::uint32_t seed)
      : small("small", testing::random_array<T>({2}, seed)),
        large("large", testing::random_array<T>({256}, seed + 1)) {}
  Parameter<T> small;
  Parameter<T> large;

 protected:
  void collect_parameters(const std::string& prefix,
                          typename Module<T>::NamedParameters& out) override {
    this->add_parameter(prefix, small, out);
    this->add_parameter(prefix, large, out);
  }
};

// The outcome of f(): "returned", or the exception's kind and message, where
// the kind is "runtime_error", "invalid_argument" or "other". If f has not
// returned after 5 s (blocked opening a FIFO), `fifo` is opened for writing,
// which releases it, and the outcome starts with "blocked".
template <class F>
std::string outcome_without_blocking(F f, const fs::path& fifo) {
  auto result = std::async(std::launch::async, [&]() -> std::string {
    try {
      f();
      return "returned";
    } catch (const std::exception& e) {
      const std::string kind = typeid(e) == typeid(std::runtime_error)      ? "runtime_error"
                               : typeid(e) == typeid(std::invalid_argument) ? "invalid_argument"
                                                                            : "other";
      return kind + ": " + e.what();
    }
  });
  if (result.wait_for(std::chrono::seconds(5)) == std::future_status::timeout) {
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
    return "blocked, then " + result.get();
  }
  return result.get();
}

// True when `text` holds a control character (other than none at all).
bool has_control_character(const std::string& text) {
  for (char c : text)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return true;
  return false;
}

// `text` with every "\n" replaced by "\r\n".
std::string with_crlf(const std::string& text) {
  std::string out;
  for (char c : text) out += c == '\n' ? std::string("\r\n") : std::string(1, c);
  return out;
}

}  // namespace

// ---------------------------------------------------------------- the format and the atomic save

TEST_CASE_TEMPLATE("checkpoint: save then load restores every value bit for bit", T, float,
                   double) {
  TempDir tmp;
  const fs::path dir = tmp / "ckpt";
  TestComposite<T> saved(4);
  // Values a text format or a conversion would not keep.
  saved.w1.bias.value(0) = -T(0);
  saved.w1.bias.value(1) = std::numeric_limits<T>::quiet_NaN();
  saved.w1.bias.value(2) = std::numeric_limits<T>::infinity();
  saved.w1.bias.value(3) = std::numeric_limits<T>::denorm_min();
  saved.scale.value() = T(1) / T(3);
  saved.save(dir);

  CHECK(directory_names(dir) == std::vector<std::string>{"manifest.tsv", "scale.npy", "w1.bias.npy",
                                                         "w1.weight.npy", "w2.bias.npy",
                                                         "w2.weight.npy"});
  CHECK(directory_names(tmp.path()) == std::vector<std::string>{"ckpt"});  // no temporary left
  const std::string dtype = sizeof(T) == 4 ? "float32" : "float64";
  CHECK(read_file(dir / "manifest.tsv") ==
        "xtgrad-checkpoint 2\n"
        "module\t{\"type\":\"Module\",\"options\":{},\"children\":[[\"w1\",{\"type\":"
        "\"Module\",\"options\":{}}],[\"w2\",{\"type\":\"Module\",\"options\":{}}]]}\n"
        "w1.weight\t" +
            dtype +
            "\t4x3\tw1.weight.npy\n"
            "w1.bias\t" +
            dtype +
            "\t4\tw1.bias.npy\n"
            "w2.weight\t" +
            dtype +
            "\t3x4\tw2.weight.npy\n"
            "w2.bias\t" +
            dtype +
            "\t3\tw2.bias.npy\n"
            "scale\t" +
            dtype + "\tscalar\tscale.npy\n");
  // Each file is a plain .npy of that parameter.
  CHECK(load_npy<T>(dir / "w2.weight.npy") == saved.w2.weight.value);

  TestComposite<T> loaded(5);
  REQUIRE_FALSE(bit_equal(snapshot<T>(loaded), snapshot<T>(saved)));
  loaded.w1.weight.grad.fill(T(2));
  loaded.load(dir);
  CHECK(bit_equal(snapshot<T>(loaded), snapshot<T>(saved)));
  CHECK(std::signbit(loaded.w1.bias.value(0)));
  CHECK(std::isnan(loaded.w1.bias.value(1)));
  CHECK(xt::all(xt::equal(loaded.w1.weight.grad, T(2))));  // load leaves gradients alone
}

TEST_CASE("checkpoint: save_checkpoint and load_checkpoint work on any named parameters") {
  TempDir tmp;
  Parameter<double> a("a", xt::xarray<double>{1.5, -2.0}), b("b", xt::xarray<double>(7.0));
  save_checkpoint<double>(tmp / "ckpt", {{"first", &a}, {"second", &b}});
  CHECK(read_file(tmp / "ckpt" / "manifest.tsv") ==
        "xtgrad-checkpoint 1\nfirst\tfloat64\t2\tfirst.npy\nsecond\tfloat64\tscalar\tsecond.npy\n");
  Parameter<double> c("c", xt::xarray<double>{0.0, 0.0}), d("d", xt::xarray<double>(0.0));
  load_checkpoint<double>(tmp / "ckpt", {{"first", &c}, {"second", &d}});
  CHECK(c.value == xt::xarray<double>{1.5, -2.0});
  CHECK(d.value() == 7.0);
  // Messages name the function given as the caller, or the function itself.
  CHECK_THROWS_WITH_PARTS(load_checkpoint<double>(tmp / "ckpt", {{"first", &c}}),
                          std::invalid_argument,
                          {"xtgrad::load_checkpoint:", "unexpected parameter(s) 'second'"});
  CHECK_THROWS_WITH_PARTS(load_checkpoint<double>(tmp / "ckpt", {{"first", &c}}, "Thing::restore"),
                          std::invalid_argument, {"xtgrad::Thing::restore:"});
}

TEST_CASE("checkpoint: save replaces a previous checkpoint and accepts an empty directory") {
  TempDir tmp;
  const fs::path dir = tmp / "ckpt";
  TestComposite<double> first(6), second(7), loaded(8);
  first.save(dir);
  second.save(dir);  // dir exists: swapped atomically, the old contents removed
  CHECK(directory_names(tmp.path()) == std::vector<std::string>{"ckpt"});
  loaded.load(dir);
  CHECK(bit_equal(snapshot<double>(loaded), snapshot<double>(second)));

  fs::create_directory(tmp / "empty");
  first.save(tmp / "empty/");  // a trailing separator names the same directory
  CHECK(directory_names(tmp.path()) == std::vector<std::string>{"ckpt", "empty"});
  loaded.load(tmp / "empty");
  CHECK(bit_equal(snapshot<double>(loaded), snapshot<double>(first)));
}

TEST_CASE("checkpoint: a save that fails part-way leaves the previous checkpoint as it was") {
  // A real failure: with RLIMIT_FSIZE at 512 bytes, small.npy (136 bytes) is
  // written and large.npy (1152 bytes) fails with EFBIG part-way through its
  // data, as on a full disk.
  TempDir tmp;
  const fs::path dir = tmp / "ckpt";
  TestSmallThenLarge<float> old_values(9);
  old_values.save(dir);
  const std::string old_manifest = read_file(dir / "manifest.tsv");
  const std::string old_large = read_file(dir / "large.npy");
  REQUIRE(old_large.size() == 128 + 256 * 4);

  TestSmallThenLarge<float> new_values(10);
  const auto save_limited = [&](const fs::path& target) -> std::string {
    FileSizeLimit limit(512);
    REQUIRE(limit.set());
    try {
      new_values.save(target);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "saved";
  };
  const std::string what = save_limited(dir);
  INFO(what);
  CHECK(testing::message_contains(
      std::runtime_error(what),
      {"xtgrad::Module::save:", "cannot write", "large.npy", "File too large"}));

  // The old checkpoint is untouched and no temporary directory is left.
  CHECK(directory_names(tmp.path()) == std::vector<std::string>{"ckpt"});
  CHECK(directory_names(dir) == std::vector<std::string>{"large.npy", "manifest.tsv", "small.npy"});
  CHECK(read_file(dir / "manifest.tsv") == old_manifest);
  CHECK(read_file(dir / "large.npy") == old_large);
  TestSmallThenLarge<float> loaded(11);
  loaded.load(dir);
  CHECK(bit_equal(snapshot<float>(loaded), snapshot<float>(old_values)));

  // The same when the very first save into a new directory fails.
  CHECK(save_limited(tmp / "fresh").find("File too large") != std::string::npos);
  CHECK(directory_names(tmp.path()) == std::vector<std::string>{"ckpt"});

  // Without the limit the same save succeeds.
  new_values.save(dir);
  loaded.load(dir);
  CHECK(bit_equal(snapshot<float>(loaded), snapshot<float>(new_values)));
}

TEST_CASE("checkpoint: save refuses to overwrite what is not a checkpoint") {
  TempDir tmp;
  TestComposite<double> m(12);

  fs::create_directory(tmp / "data");
  write_file(tmp / "data" / "notes.txt", "precious");
  CHECK_THROWS_WITH_PARTS(m.save(tmp / "data"), std::invalid_argument,
                          {"Module::save", "data", "not an xtgrad checkpoint", "refusing"});
  CHECK(directory_names(tmp / "data") == std::vector<std::string>{"notes.txt"});
  CHECK(read_file(tmp / "data" / "notes.txt") == "precious");

  write_file(tmp / "data" / "manifest.tsv", "something else\n");
  CHECK_THROWS_WITH_PARTS(m.save(tmp / "data"), std::invalid_argument,
                          {"not an xtgrad checkpoint"});

  // A manifest.tsv that is a FIFO is not read (that would block), nor one
  // that is a link to a checkpoint's manifest elsewhere.
  fs::remove(tmp / "data" / "manifest.tsv");
  REQUIRE(::mkfifo((tmp / "data" / "manifest.tsv").c_str(), 0600) == 0);
  const std::string fifo_outcome =
      outcome_without_blocking([&] { m.save(tmp / "data"); }, tmp / "data" / "manifest.tsv");
  INFO(fifo_outcome);
  CHECK(fifo_outcome.rfind("invalid_argument: ", 0) == 0);
  CHECK(fifo_outcome.find("not an xtgrad checkpoint") != std::string::npos);
  m.save(tmp / "real");
  fs::remove(tmp / "data" / "manifest.tsv");
  fs::create_symlink(tmp / "real" / "manifest.tsv", tmp / "data" / "manifest.tsv");
  CHECK_THROWS_WITH_PARTS(m.save(tmp / "data"), std::invalid_argument,
                          {"not an xtgrad checkpoint"});
  CHECK(read_file(tmp / "data" / "notes.txt") == "precious");
  fs::remove_all(tmp / "real");

  write_file(tmp / "file", "precious");
  CHECK_THROWS_WITH_PARTS(m.save(tmp / "file"), std::invalid_argument,
                          {"Module::save", "file", "not a directory"});
  CHECK(read_file(tmp / "file") == "precious");
  CHECK(directory_names(tmp.path()) == std::vector<std::string>{"data", "file"});

  CHECK_THROWS_WITH_PARTS(m.save(tmp / "no" / "such" / "parent"), std::runtime_error,
                          {"Module::save", "cannot create the temporary directory"});
}

TEST_CASE("checkpoint: save rejects a parameter name that cannot be a file name") {
  TempDir tmp;
  TestLeaf<float> m(2, 2, 13);
  m.weight.name = "sub/weight";
  CHECK_THROWS_WITH_PARTS(m.save(tmp / "ckpt"), std::invalid_argument,
                          {"Module::save", "'sub/weight'", "no '/'"});
  m.weight.name = "tab\tname";
  CHECK_THROWS_WITH_PARTS(m.save(tmp / "ckpt"), std::invalid_argument,
                          {"Module::save", "'tab\\tname'"});
  CHECK(directory_names(tmp.path()).empty());
}

// ---------------------------------------------------------------- loading

TEST_CASE("checkpoint: a failed load leaves the module unchanged") {
  TempDir tmp;
  const fs::path dir = tmp / "ckpt";
  TestComposite<double> saved(14);
  saved.save(dir);
  TestComposite<double> target(15);
  const auto before = snapshot<double>(target);
  const auto check_unchanged = [&] { CHECK(bit_equal(snapshot<double>(target), before)); };

  SUBCASE("a parameter of the module is missing from the checkpoint") {
    TestComposite<double> no_scale(16, false);
    fs::remove_all(dir);
    no_scale.save(dir);
    CHECK_THROWS_WITH_PARTS(target.load(dir), std::invalid_argument,
                            {"Module::load", "missing parameter(s) 'scale'"});
    check_unchanged();
  }
  SUBCASE("the checkpoint has a parameter the module lacks") {
    TestComposite<double> no_scale(16, false);
    const auto no_scale_before = snapshot<double>(no_scale);
    CHECK_THROWS_WITH_PARTS(
        no_scale.load(dir), std::invalid_argument,
        {"Module::load", "unexpected parameter(s) 'scale'", "not in the module"});
    CHECK(bit_equal(snapshot<double>(no_scale), no_scale_before));
  }
  SUBCASE("a shape differs") {
    TestComposite<double> wide(17, true, 5);
    const auto wide_before = snapshot<double>(wide);
    CHECK_THROWS_WITH_PARTS(
        wide.load(dir), std::invalid_argument,
        {"Module::load", "parameter 'w1.weight'", "shape [4, 3]", "the module expects [5, 3]"});
    CHECK(bit_equal(snapshot<double>(wide), wide_before));
  }
  SUBCASE("a float32 checkpoint into a double module") {
    TestComposite<float> single(18);
    fs::remove_all(dir);
    single.save(dir);
    CHECK_THROWS_WITH_PARTS(target.load(dir), std::invalid_argument,
                            {"Module::load", "parameter 'w1.weight'", "stores float32",
                             "module's parameter is float64"});
    check_unchanged();
  }
  SUBCASE("a manifest that lies about the dtype is caught by the file check") {
    TestComposite<float> single(18);
    fs::remove_all(dir);
    single.save(dir);
    std::string manifest = read_file(dir / "manifest.tsv");
    for (std::size_t at; (at = manifest.find("float32")) != std::string::npos;)
      manifest.replace(at, 7, "float64");
    write_file(dir / "manifest.tsv", manifest);
    CHECK_THROWS_WITH_PARTS(
        target.load(dir), std::invalid_argument,
        {"parameter 'w1.weight'", "w1.weight.npy", "has dtype float32", "expected float64"});
    check_unchanged();
  }
  SUBCASE("a corrupt (truncated) file, read after the others") {
    const fs::path file = dir / "scale.npy";
    const std::string bytes = read_file(file);
    write_file(file, bytes.substr(0, bytes.size() - 3));
    CHECK_THROWS_WITH_PARTS(target.load(dir), std::invalid_argument,
                            {"Module::load", "parameter 'scale'", "scale.npy", "truncated"});
    check_unchanged();
  }
  SUBCASE("a file missing") {
    fs::remove(dir / "w2.bias.npy");
    CHECK_THROWS_WITH_PARTS(target.load(dir), std::runtime_error,
                            {"Module::load", "parameter 'w2.bias'", "w2.bias.npy", "cannot open"});
    check_unchanged();
  }
  SUBCASE("a file whose shape disagrees with the manifest") {
    save_npy(dir / "w2.bias.npy", xt::xarray<double>{{1.0, 2.0, 3.0}});
    CHECK_THROWS_WITH_PARTS(
        target.load(dir), std::invalid_argument,
        {"parameter 'w2.bias'", "holds shape [1, 3]", "manifest says [3]", "module expects [3]"});
    check_unchanged();
  }
  SUBCASE("the manifest is missing") {
    fs::remove(dir / "manifest.tsv");
    CHECK_THROWS_WITH_PARTS(target.load(dir), std::invalid_argument,
                            {"Module::load", "ckpt", "has no manifest.tsv"});
    check_unchanged();
  }
  SUBCASE("malformed manifests") {
    const std::string good = read_file(dir / "manifest.tsv");
    const auto check_manifest = [&](const std::string& text, const std::string& what) {
      INFO("manifest:\n" << text);
      write_file(dir / "manifest.tsv", text);
      CHECK_THROWS_WITH_PARTS(target.load(dir), std::invalid_argument,
                              {"Module::load", "manifest.tsv", what});
      check_unchanged();
    };
    check_manifest("", "first line is an empty file");
    check_manifest("xtgrad-checkpoint 3\n",
                   "expected 'xtgrad-checkpoint 1' or 'xtgrad-checkpoint 2'");
    check_manifest("xtgrad-checkpoint 2\n", "line 2: missing, expected 'module'");
    check_manifest(good + "extra\tfloat64\n", "line 8: expected 4 tab-separated fields");
    check_manifest(good + "scale\tfloat64\tscalar\tscale.npy\n", "'scale' is listed twice");
    check_manifest(good + "x\tint32\t2\tx.npy\n", "dtype 'int32'");
    check_manifest(good + "x\tfloat64\t2by3\tx.npy\n", "shape '2by3'");
    check_manifest(good + "x\tfloat64\t2\t../x.npy\n", "file '../x.npy'");
    // Only a final '\r' per line and empty lines at the end are tolerated.
    check_manifest(good + "\nscale\tfloat64\tscalar\tscale.npy\n", "line 8: expected 4");
    check_manifest(good + " \n", "line 8: expected 4 tab-separated fields");
    check_manifest("xtgrad-checkpoint 1 \n", "first line is 'xtgrad-checkpoint 1 '");
  }
  SUBCASE("the directory does not exist") {
    CHECK_THROWS_WITH_PARTS(target.load(tmp / "absent"), std::runtime_error,
                            {"Module::load", "absent", "No such file"});
    check_unchanged();
  }
}

TEST_CASE("checkpoint: a manifest with CRLF line endings or empty lines at the end loads") {
  TempDir tmp;
  const fs::path dir = tmp / "ckpt";
  TestComposite<double> saved(20);
  saved.save(dir);
  const std::string good = read_file(dir / "manifest.tsv");
  REQUIRE(good.find('\r') == std::string::npos);
  for (const std::string& text :
       {with_crlf(good), good + "\n", good + "\n\n\n", with_crlf(good) + "\r\n\r\n",
        good.substr(0, good.size() - 1), with_crlf(good).substr(0, with_crlf(good).size() - 1)}) {
    INFO("manifest: " << detail::escaped(text));
    write_file(dir / "manifest.tsv", text);
    TestComposite<double> loaded(21);
    loaded.load(dir);
    CHECK(bit_equal(snapshot<double>(loaded), snapshot<double>(saved)));
  }
}

TEST_CASE("checkpoint: a malformed manifest's message shows control characters escaped") {
  TempDir tmp;
  const fs::path dir = tmp / "ckpt";
  TestComposite<double> m(22);
  m.save(dir);
  const std::string good = read_file(dir / "manifest.tsv");
  const std::string body = good.substr(good.find('\n') + 1);
  const auto before = snapshot<double>(m);
  const auto check_escaped = [&](const std::string& text, const std::string& shown) {
    INFO("manifest: " << detail::escaped(text));
    write_file(dir / "manifest.tsv", text);
    bool thrown = false;
    try {
      m.load(dir);
    } catch (const std::invalid_argument& e) {
      thrown = true;
      const std::string what = e.what();
      INFO("message: " << detail::escaped(what));
      CHECK(what.find(shown) != std::string::npos);
      CHECK_FALSE(has_control_character(what));
    }
    CHECK(thrown);
    CHECK(bit_equal(snapshot<double>(m), before));
  };
  // Two '\r' before a '\n': one is stripped, the other is shown.
  check_escaped("xtgrad-checkpoint 1\r\r\n" + body, "first line is 'xtgrad-checkpoint 1\\r'");
  check_escaped("xtgrad-checkpoint\x01 1\n" + body, "'xtgrad-checkpoint\\x01 1'");
  check_escaped(good + "x\tfloat64\x7f\t2\tx.npy\n", "dtype 'float64\\x7f'");
  check_escaped(good + "x\tfloat64\t2\r\r\n", "found 3 in 'x\\tfloat64\\t2\\r'");
  check_escaped(good + "odd\x1b[31m\tfloat64\t2\todd.npy\n",
                "unexpected parameter(s) 'odd\\x1b[31m'");
}

TEST_CASE("checkpoint: a file declaring another shape is refused from its header") {
  // Sparse files (ftruncate: no disk blocks, no bytes read) whose header
  // declares 1 GiB and 64 GiB of float64 under a manifest that claims the
  // module's shape. The header is compared with the parameter before any
  // data is allocated, so the peak memory of the process hardly grows; a
  // reader that loaded the array first would need the whole size (or throw
  // std::bad_alloc).
  TempDir tmp;
  const fs::path dir = tmp / "ckpt";
  TestLeaf<double> m(3, 4, 23);
  m.save(dir);
  const auto before = snapshot<double>(m);
  const std::size_t peak_before = peak_rss_bytes();
  for (const auto& entry :
       {std::pair<std::string, std::size_t>{"(16384, 8192)", std::size_t(1) << 27},
        std::pair<std::string, std::size_t>{"(131072, 65536)", std::size_t(1) << 33}}) {
    // not structured bindings: doctest's message macros capture them in lambdas (not C++17)
    const auto& shape = std::get<0>(entry);
    const auto& elements = std::get<1>(entry);
    INFO("declared shape " << shape);
    const std::string header = npy_file(npy_dict("<f8", shape), "");
    write_file(dir / "weight.npy", header);
    if (::truncate((dir / "weight.npy").c_str(),
                   static_cast<off_t>(header.size() + elements * sizeof(double))) != 0) {
      MESSAGE("SKIPPED: this file system cannot hold a sparse file of " << shape);
      continue;
    }
    REQUIRE(read_npy_header(dir / "weight.npy").size == elements);  // the file itself is valid
    std::string bracketed = shape;
    bracketed.front() = '[';
    bracketed.back() = ']';
    CHECK_THROWS_WITH_PARTS(m.load(dir), std::invalid_argument,
                            {"Module::load", "parameter 'weight'", "weight.npy",
                             "holds shape " + bracketed, "the module expects [4, 3]"});
    CHECK(bit_equal(snapshot<double>(m), before));
    const std::size_t growth = peak_rss_bytes() - peak_before;
    INFO("peak resident memory grew by " << growth << " bytes");
    CHECK(growth < (std::size_t(64) << 20));  // far below the 1 GiB of the smaller file
  }
}

TEST_CASE("checkpoint: an entry that is not a regular file is a runtime_error naming what it is") {
  TempDir tmp;
  const fs::path dir = tmp / "ckpt";
  TestLeaf<float> m(3, 4, 24);
  m.save(dir);
  const auto before = snapshot<float>(m);
  const auto check_refused = [&](const fs::path& entry, const std::vector<std::string>& parts) {
    const std::string outcome = outcome_without_blocking([&] { m.load(dir); }, entry);
    INFO(outcome);
    CHECK(outcome.rfind("runtime_error: xtgrad::Module::load: ", 0) == 0);
    CHECK(testing::message_contains(std::runtime_error(outcome), parts));
    CHECK(bit_equal(snapshot<float>(m), before));
  };
  const fs::path manifest = dir / "manifest.tsv", bias = dir / "bias.npy";
  const std::string manifest_text = read_file(manifest), bias_bytes = read_file(bias);

  fs::remove(manifest);
  fs::create_directory(manifest);
  check_refused(manifest, {"manifest.tsv", "Is a directory", "not a regular file"});
  fs::remove(manifest);
  REQUIRE(::mkfifo(manifest.c_str(), 0600) == 0);
  check_refused(manifest, {"manifest.tsv", "Is a FIFO", "not a regular file"});
  fs::remove(manifest);
  {
    testing::UnixSocket socket(manifest);
    check_refused(manifest, {"manifest.tsv", "Is a socket", "not a regular file"});
  }
  fs::remove(manifest);
  write_file(manifest, manifest_text);

  fs::remove(bias);
  fs::create_directory(bias);
  check_refused(bias, {"parameter 'bias'", "bias.npy", "Is a directory", "not a regular file"});
  fs::remove(bias);
  REQUIRE(::mkfifo(bias.c_str(), 0600) == 0);
  check_refused(bias, {"parameter 'bias'", "bias.npy", "Is a FIFO", "not a regular file"});
  fs::remove(bias);
  {
    testing::UnixSocket socket(bias);
    check_refused(bias, {"parameter 'bias'", "bias.npy", "Is a socket", "not a regular file"});
  }
  fs::remove(bias);
  // A device node of /dev/zero's kind (needs the privilege to create one).
  if (::mknod(bias.c_str(), S_IFCHR | 0600, makedev(1, 5)) == 0) {
    check_refused(bias, {"parameter 'bias'", "bias.npy", "Is a character device"});
    fs::remove(bias);
  } else {
    MESSAGE("SKIPPED the device case: cannot create a device node here");
  }
  write_file(bias, bias_bytes);
  m.load(dir);  // whole again
}

TEST_CASE("checkpoint: a symbolic link is followed only to another file of the same directory") {
  TempDir tmp;
  const fs::path dir = tmp / "ckpt";
  TestLeaf<float> source(3, 4, 25), m(3, 4, 26);
  source.save(dir);
  const auto before = snapshot<float>(m);
  const fs::path bias = dir / "bias.npy";
  const auto check_refused = [&](const std::vector<std::string>& parts) {
    CHECK_THROWS_WITH_PARTS(m.load(dir), std::runtime_error, (parts));
    CHECK(bit_equal(snapshot<float>(m), before));
  };

  // A valid file of the right shape outside the checkpoint: not read.
  fs::rename(bias, tmp / "outside.npy");
  fs::create_symlink(tmp / "outside.npy", bias);
  check_refused({"Module::load", "parameter 'bias'", "bias.npy", "symbolic link",
                 "pointing outside", "outside.npy"});
  fs::remove(bias);
  fs::create_symlink("../outside.npy", bias);
  check_refused({"parameter 'bias'", "symbolic link pointing outside", "'../outside.npy'"});
  fs::remove(bias);
  fs::create_symlink("/dev/zero", bias);
  check_refused({"parameter 'bias'", "symbolic link pointing outside", "'/dev/zero'"});
  fs::remove(bias);
  // Only a plain name counts as inside: "./x" and "../ckpt/x" are refused too.
  fs::copy_file(tmp / "outside.npy", dir / "bias_values.npy");
  fs::create_symlink("./bias_values.npy", bias);
  check_refused({"parameter 'bias'", "symbolic link pointing outside"});
  fs::remove(bias);
  // A link to a link is not followed, even inside.
  fs::create_symlink("bias_values.npy", dir / "link1.npy");
  fs::create_symlink("link1.npy", bias);
  check_refused({"parameter 'bias'", "another symbolic link"});
  fs::remove(bias);
  // A link to a directory entry that is a FIFO is refused as a FIFO.
  REQUIRE(::mkfifo((dir / "pipe").c_str(), 0600) == 0);
  fs::create_symlink("pipe", bias);
  const std::string outcome = outcome_without_blocking([&] { m.load(dir); }, dir / "pipe");
  CHECK(outcome.find("runtime_error: ") == 0);
  CHECK(outcome.find("Is a FIFO") != std::string::npos);
  fs::remove(bias);

  // The manifest as a link to a copy outside: refused.
  const fs::path manifest = dir / "manifest.tsv";
  fs::rename(manifest, tmp / "manifest_copy.tsv");
  fs::create_symlink(tmp / "manifest_copy.tsv", manifest);
  fs::create_symlink("bias_values.npy", bias);
  check_refused({"Module::load", "manifest.tsv", "symbolic link pointing outside"});
  fs::remove(manifest);
  fs::rename(tmp / "manifest_copy.tsv", manifest);

  // A link to another regular file of the same directory is followed.
  m.load(dir);
  CHECK(bit_equal(snapshot<float>(m), snapshot<float>(source)));
}
