#pragma once
// Helpers shared by every test file. Nothing here computes an expected value
// with the engine: references are written out in the tests themselves.

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <xtensor/xarray.hpp>
#include <xtensor/xio.hpp>

#include <xtgrad/engine/gradcheck.hpp>
#include <xtgrad/engine/tape.hpp>

namespace xtgrad::testing {

// Comparison tolerance for a result computed in T against a reference in
// double: looser for float.
template <class T>
constexpr double tolerance() {
  return std::is_same_v<T, float> ? 1e-5 : 1e-12;
}

// Deterministic uniform [lo, hi) values of the given shape (std::mt19937, not
// the engine or xtensor's random module).
template <class T = double>
xt::xarray<T> random_array(const std::vector<std::size_t>& shape, std::uint32_t seed,
                           double lo = -1.0, double hi = 1.0) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<double> uniform(lo, hi);
  xt::xarray<T> a = xt::empty<T>(shape);
  for (auto& element : a) element = static_cast<T>(uniform(generator));
  return a;
}

// Uniform values kept at least `margin` away from zero (away from the kinks
// of relu and abs), with random signs.
template <class T = double>
xt::xarray<T> random_away_from_zero(const std::vector<std::size_t>& shape, std::uint32_t seed,
                                    double margin = 0.1, double hi = 1.0) {
  xt::xarray<T> a = random_array<T>(shape, seed, -1.0, 1.0);
  for (auto& element : a) {
    const double magnitude = margin + (hi - margin) * std::abs(static_cast<double>(element));
    element = static_cast<T>(element < 0 ? -magnitude : magnitude);
  }
  return a;
}

// The checks below exist where doctest's assertions do: a program that
// includes these helpers with DOCTEST_CONFIG_DISABLE (an mpirun program of
// tests/distributed) has no assertions, and would only keep their unused
// arguments and locals.
#ifndef DOCTEST_CONFIG_DISABLE

// |a - b| <= atol + rtol * |b| elementwise, with equal shapes; on failure the
// doctest message shows both arrays.
template <class A, class B>
void check_close(const A& actual, const B& expected, double rtol = 1e-12, double atol = 1e-12) {
  const xt::xarray<double> a = xt::cast<double>(xt::xarray<typename A::value_type>(actual));
  const xt::xarray<double> b = xt::cast<double>(xt::xarray<typename B::value_type>(expected));
  std::ostringstream message;
  message << "actual:\n" << a << "\nexpected:\n" << b;
  INFO(message.str());
  REQUIRE(a.shape() == b.shape());
  bool close = true;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double x = a.data()[i], y = b.data()[i];
    if (std::isnan(x) || std::isnan(y) || std::abs(x - y) > atol + rtol * std::abs(y))
      close = false;
  }
  CHECK(close);
}

// Element by element against reference values in double that may be NaN or
// infinite: NaN where expected is NaN, the same infinity, and
// |actual - expected| <= atol + rtol |expected| otherwise.
template <class T>
void check_ieee(const xt::xarray<T>& actual, const double* expected, std::size_t n, double rtol,
                double atol) {
  REQUIRE(actual.size() == n);
  for (std::size_t i = 0; i < n; ++i) {
    const double a = actual.data()[i], e = expected[i];
    INFO("element " << i << ": " << a << ", expected " << e);
    if (std::isnan(e))
      CHECK(std::isnan(a));
    else if (std::isinf(e))
      CHECK(a == e);
    else
      CHECK(std::abs(a - e) <= atol + rtol * std::abs(e));
  }
}

// Runs gradcheck and fails the test with its report.
inline void check_gradients(const GradcheckFunction& f,
                            const std::vector<xt::xarray<double>>& inputs,
                            const GradcheckOptions& options = {}) {
  const GradcheckResult result = gradcheck(f, inputs, options);
  INFO(result.report());
  CHECK(result.passed);
}

// Runs `f`, which must throw AnomalyError in `phase` naming `op`, and checks
// that the failed call left `tape` with as many nodes as before: a call that
// anomaly mode stops records nothing.
template <class T, class F>
void check_anomaly(const Tape<T>& tape, AnomalyError::Phase phase, const std::string& op, F&& f) {
  INFO("expected an AnomalyError naming " << op);
  const std::size_t before = tape.size();
  bool thrown = false;
  try {
    f();
  } catch (const AnomalyError& e) {
    thrown = true;
    CHECK(e.op() == op);
    CHECK(e.phase() == phase);
  } catch (const std::exception& e) {
    FAIL_CHECK("expected AnomalyError, got: " << e.what());
  }
  CHECK(thrown);
  CHECK(tape.size() == before);
}

// The forward case: `f` records an op whose value is not finite.
template <class T, class F>
void check_forward_anomaly(const Tape<T>& tape, const std::string& op, F&& f) {
  check_anomaly(tape, AnomalyError::Phase::forward, op, std::forward<F>(f));
}

// The backward case: a backward rule of `op` writes a non-finite gradient.
template <class T, class F>
void check_backward_anomaly(const Tape<T>& tape, const std::string& op, F&& f) {
  check_anomaly(tape, AnomalyError::Phase::backward, op, std::forward<F>(f));
}

#endif  // DOCTEST_CONFIG_DISABLE

// A fresh scratch directory under the system temp directory, removed (with
// everything in it) when the object goes out of scope.
class TempDir {
 public:
  explicit TempDir(const std::string& tag = "test") {
    std::random_device device;
    path_ = std::filesystem::temp_directory_path() /
            ("xtgrad-" + tag + "-" + std::to_string(device()) + "-" + std::to_string(device()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// The bytes of the file at `path` (empty when it cannot be read).
inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The names of the entries of `dir`, sorted.
inline std::vector<std::string> directory_names(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Creates or replaces `path` with exactly `bytes`.
inline void write_file(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

// A Unix domain socket bound at `path` (a file system entry that is neither
// a regular file nor openable), closed when the object goes out of scope.
class UnixSocket {
 public:
  explicit UnixSocket(const std::filesystem::path& path) : fd_(::socket(AF_UNIX, SOCK_STREAM, 0)) {
    REQUIRE(fd_ >= 0);
    ::sockaddr_un address{};
    address.sun_family = AF_UNIX;
    REQUIRE(path.string().size() < sizeof address.sun_path);
    std::strcpy(address.sun_path, path.c_str());
    REQUIRE(::bind(fd_, reinterpret_cast<const ::sockaddr*>(&address), sizeof address) == 0);
  }
  ~UnixSocket() { ::close(fd_); }
  UnixSocket(const UnixSocket&) = delete;
  UnixSocket& operator=(const UnixSocket&) = delete;

 private:
  int fd_;
};

// The exact message of a std::invalid_argument thrown by f, or "" if none was.
template <class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

// True when `what()` of the exception contains every one of `parts`.
inline bool message_contains(const std::exception& e, const std::vector<std::string>& parts) {
  const std::string what = e.what();
  for (const auto& part : parts)
    if (what.find(part) == std::string::npos) return false;
  return true;
}

}  // namespace xtgrad::testing

// CHECK_THROWS_WITH_PARTS(expr, std::invalid_argument, {"linear", "'x'", "[2, 3]"}):
// expr throws exactly that type and its message contains every part.
#define CHECK_THROWS_WITH_PARTS(expr, type, ...)                                           \
  do {                                                                                     \
    bool xtgrad_thrown_ = false;                                                           \
    try {                                                                                  \
      (void)(expr);                                                                        \
    } catch (const type& e) {                                                              \
      xtgrad_thrown_ = true;                                                               \
      const std::string xtgrad_what_ = e.what();                                           \
      INFO("message: " << xtgrad_what_);                                                   \
      CHECK(::xtgrad::testing::message_contains(e, std::vector<std::string> __VA_ARGS__)); \
    }                                                                                      \
    CHECK_MESSAGE(xtgrad_thrown_, #expr " did not throw " #type);                          \
  } while (false)
