// .npy reading and writing. Expected file bytes are built by hand here from
// the format description (numpy/lib/format.py), never with the writer under
// test; when NumPy is installed it reads our files and writes files for us.

#include <sys/stat.h>

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <xtensor/xadapt.hpp>

#include <xtgrad/io/npy.hpp>

#include "support/npy_bytes.hpp"
#include "support/python.hpp"
#include "support/test_helpers.hpp"

using xtgrad::testing::directory_names;
using xtgrad::testing::element_bytes;
using xtgrad::testing::npy_dict;
using xtgrad::testing::npy_file;
using xtgrad::testing::read_file;
using xtgrad::testing::TempDir;
using xtgrad::testing::write_file;

using namespace xtgrad;
using xtgrad::testing::python_with_numpy;
namespace fs = std::filesystem;

namespace {

template <class T>
bool bit_equal(const xt::xarray<T>& a, const xt::xarray<T>& b) {
  // memcmp with the null data() of an empty array is undefined: compare sizes first.
  return a.shape() == b.shape() &&
         (a.size() == 0 || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

}  // namespace

TEST_CASE_TEMPLATE("npy: save_npy then load_npy round-trips every shape bit for bit", T, float,
                   double) {
  TempDir dir;
  const std::vector<std::vector<std::size_t>> shapes = {{}, {0}, {3}, {2, 3}, {2, 0, 4}, {2, 3, 4}};
  std::uint32_t seed = 11;
  for (const auto& shape : shapes) {
    INFO("shape " << xt::adapt(shape));
    const xt::xarray<T> a = testing::random_array<T>(shape, ++seed, -10.0, 10.0);
    const fs::path file = dir / "a.npy";
    save_npy(file, a);
    const xt::xarray<T> b = load_npy<T>(file);
    CHECK(std::vector<std::size_t>(b.shape().begin(), b.shape().end()) == shape);
    CHECK(bit_equal(a, b));
    // The bytes: version 1.0, data at a multiple of 64, C-order little-endian elements.
    const std::string bytes = read_file(file);
    REQUIRE(bytes.size() >= 10);
    CHECK(bytes.substr(0, 8) == std::string("\x93NUMPY\x01\x00", 8));
    const std::size_t header_length = static_cast<unsigned char>(bytes[8]) |
                                      static_cast<std::size_t>(static_cast<unsigned char>(bytes[9]))
                                          << 8;
    CHECK((10 + header_length) % 64 == 0);
    CHECK(bytes[10 + header_length - 1] == '\n');
    CHECK(bytes.size() == 10 + header_length + a.size() * sizeof(T));
    CHECK(bytes.substr(10 + header_length) ==
          std::string(reinterpret_cast<const char*>(a.data()), a.size() * sizeof(T)));
    CHECK(directory_names(dir.path()) == std::vector<std::string>{"a.npy"});  // no temp file left
  }
}

TEST_CASE("npy: the header is numpy's dict for each shape") {
  TempDir dir;
  const auto header_of = [&](const fs::path& file) {
    const std::string bytes = read_file(file);
    return bytes.substr(10, bytes.find('}') - 9);
  };
  save_npy(dir / "s.npy", xt::xarray<float>(2.5f));
  CHECK(header_of(dir / "s.npy") == "{'descr': '<f4', 'fortran_order': False, 'shape': (), }");
  save_npy(dir / "v.npy", xt::xarray<double>{1.0, 2.0, 3.0});
  CHECK(header_of(dir / "v.npy") == "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }");
  save_npy(dir / "m.npy", xt::xarray<double>::from_shape({2, 0, 4}));
  CHECK(header_of(dir / "m.npy") ==
        "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 0, 4), }");
}

TEST_CASE("npy: save_npy replaces a file atomically and cleans up after a failure") {
  TempDir dir;
  const fs::path file = dir / "w.npy";
  save_npy(file, xt::xarray<double>{1.0, 2.0});
  save_npy(file, xt::xarray<double>{{3.0, 5.0}, {4.0, 6.0}});
  CHECK(load_npy<double>(file) == xt::xarray<double>{{3.0, 5.0}, {4.0, 6.0}});
  CHECK(directory_names(dir.path()) == std::vector<std::string>{"w.npy"});

  // The rename onto a non-empty directory fails: nothing is left behind.
  fs::create_directory(dir / "taken.npy");
  write_file(dir / "taken.npy" / "keep", "x");
  CHECK_THROWS_WITH_PARTS(save_npy(dir / "taken.npy", xt::xarray<float>{1.0f}), std::runtime_error,
                          {"save_npy", "taken.npy"});
  CHECK(directory_names(dir.path()) == std::vector<std::string>{"taken.npy", "w.npy"});
  CHECK(read_file(dir / "taken.npy" / "keep") == "x");

  // A directory that does not exist: runtime_error, and the existing file is intact.
  CHECK_THROWS_WITH_PARTS(save_npy(dir / "missing" / "w.npy", xt::xarray<float>{1.0f}),
                          std::runtime_error, {"save_npy", "cannot create", "missing"});
  CHECK(load_npy<double>(file) == xt::xarray<double>{{3.0, 5.0}, {4.0, 6.0}});
}

TEST_CASE("npy: hand-made files in every accepted form are read correctly") {
  TempDir dir;
  const fs::path file = dir / "h.npy";
  const xt::xarray<double> m23 = {{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}};

  SUBCASE("little-endian float32, C order") {
    write_file(file, npy_file(npy_dict("<f4", "(2, 3)"), element_bytes<float>({1, 2, 3, 4, 5, 6})));
    CHECK(load_npy<float>(file) == xt::xarray<float>(m23));
  }
  SUBCASE("big-endian float64 and float32 are converted") {
    write_file(file,
               npy_file(npy_dict(">f8", "(3,)"), element_bytes<double>({1.5, -2.25, 1e300}, true)));
    CHECK(load_npy<double>(file) == xt::xarray<double>{1.5, -2.25, 1e300});
    write_file(file,
               npy_file(npy_dict(">f4", "(2, 2)"), element_bytes<float>({1, -2, 0.5, 8}, true)));
    CHECK(load_npy<float>(file) == xt::xarray<float>{{1.f, -2.f}, {0.5f, 8.f}});
  }
  SUBCASE("fortran order is converted to row-major") {
    // Column-major: element (i, j) of [2, 3] is stored at i + 2 j.
    write_file(
        file, npy_file(npy_dict("<f8", "(2, 3)", true), element_bytes<double>({1, 4, 2, 5, 3, 6})));
    CHECK(load_npy<double>(file) == m23);
  }
  SUBCASE("big-endian fortran-order 3-D") {
    // (i, j, k) of [2, 3, 4] stored at i + 2 j + 6 k, value 100 i + 10 j + k.
    std::vector<double> stored(24);
    xt::xarray<float> expected = xt::xarray<float>::from_shape({2, 3, 4});
    for (std::size_t i = 0; i < 2; ++i)
      for (std::size_t j = 0; j < 3; ++j)
        for (std::size_t k = 0; k < 4; ++k) {
          stored[i + 2 * j + 6 * k] = 100.0 * i + 10.0 * j + k;
          expected(i, j, k) = static_cast<float>(100 * i + 10 * j + k);
        }
    write_file(file,
               npy_file(npy_dict(">f4", "(2, 3, 4)", true), element_bytes<float>(stored, true)));
    CHECK(load_npy<float>(file) == expected);
  }
  SUBCASE("native and not-applicable byte orders") {
    for (const std::string descr : {"|f4", "=f4", "f4"}) {
      write_file(file, npy_file(npy_dict(descr, "(2,)"), element_bytes<float>({7, -7})));
      CHECK(load_npy<float>(file) == xt::xarray<float>{7.f, -7.f});
    }
  }
  SUBCASE("scalar and empty shapes") {
    write_file(file, npy_file(npy_dict("<f8", "()"), element_bytes<double>({-3.5})));
    const xt::xarray<double> scalar = load_npy<double>(file);
    CHECK(scalar.dimension() == 0);
    CHECK(scalar() == -3.5);
    write_file(file, npy_file(npy_dict("<f8", "(2, 0, 4)", true), ""));
    CHECK(load_npy<double>(file).shape() == xt::xarray<double>::shape_type{2, 0, 4});
    write_file(file, npy_file(npy_dict("<f4", "(0,)"), ""));
    CHECK(load_npy<float>(file).shape() == xt::xarray<float>::shape_type{0});
  }
  SUBCASE("Python literal variations: quotes, key order, spacing, no trailing comma") {
    write_file(file, npy_file("{ \"shape\" : ( 2 ,3 ) ,'fortran_order':False,\t'descr':\"<f4\"}",
                              element_bytes<float>({1, 2, 3, 4, 5, 6})));
    CHECK(load_npy<float>(file) == xt::xarray<float>(m23));
    write_file(file, npy_file(npy_dict("<f4", "(3L,)"), element_bytes<float>({1, 2, 3})));
    CHECK(load_npy<float>(file) == xt::xarray<float>{1.f, 2.f, 3.f});
  }
  SUBCASE("format versions 2.0 and 3.0 (uint32 header length)") {
    for (int major : {2, 3}) {
      write_file(file, npy_file(npy_dict("<f8", "(2, 3)"),
                                element_bytes<double>({1, 2, 3, 4, 5, 6}), major));
      CHECK(load_npy<double>(file) == m23);
    }
  }
}

TEST_CASE("npy: read_npy_header reports the validated header") {
  TempDir dir;
  const fs::path file = dir / "h.npy";
  write_file(file, npy_file(npy_dict(">f8", "(2, 3)", true),
                            element_bytes<double>({1, 2, 3, 4, 5, 6}, true)));
  const NpyHeader header = read_npy_header(file);
  CHECK(header.descr == ">f8");
  CHECK(header.dtype == "float64");
  CHECK(header.shape == std::vector<std::size_t>{2, 3});
  CHECK(header.fortran_order);
  CHECK(header.data_offset == 128);  // 10 + 59-byte dict + 1 > 64: padded to 128
  CHECK(header.size == 6);
}

TEST_CASE("npy: hostile files throw a clear std::invalid_argument") {
  TempDir dir;
  const fs::path file = dir / "bad.npy";
  const std::string six_floats = element_bytes<float>({1, 2, 3, 4, 5, 6});
  const auto check_bad = [&](const std::string& bytes, const std::vector<std::string>& parts) {
    write_file(file, bytes);
    std::vector<std::string> all = parts;
    all.push_back("load_npy");
    all.push_back("bad.npy");
    CHECK_THROWS_WITH_PARTS(load_npy<float>(file), std::invalid_argument, (all));
  };

  SUBCASE("preamble") {
    check_bad("", {"0 bytes", "too short"});
    check_bad("\x93NUMP", {"too short"});
    check_bad("PK\x03\x04 a zip file, not npy", {"not a .npy file", "magic"});
    std::string v4 = npy_file(npy_dict("<f4", "(2, 3)"), six_floats);
    v4[6] = 4;
    check_bad(v4, {"unsupported .npy format version 4.0", "expected 1.0, 2.0 or 3.0"});
    std::string v11 = npy_file(npy_dict("<f4", "(2, 3)"), six_floats);
    v11[7] = 1;
    check_bad(v11, {"version 1.1"});
    check_bad(std::string("\x93NUMPY\x01\x00\x05", 9), {"too short for the header length"});
  }
  SUBCASE("header length") {
    std::string past_end = npy_file(npy_dict("<f4", "(2, 3)"), "");
    past_end[8] = '\xe8';  // 1000: the header would end far beyond the 128-byte file
    past_end[9] = '\x03';
    check_bad(past_end, {"header length 1000", "runs past the end of the file", "128 bytes"});
    std::string huge = npy_file(npy_dict("<f4", "(2, 3)"), "", 2);
    huge[8] = huge[9] = huge[10] = huge[11] = '\xff';  // 4 GiB header
    check_bad(huge, {"header length 4294967295", "exceeds the limit"});
  }
  SUBCASE("malformed dicts") {
    const auto bad_dict = [&](const std::string& text, const std::string& what) {
      INFO("header " << text);
      check_bad(npy_file(text, six_floats), {"malformed .npy header", what});
    };
    bad_dict("[1, 2, 3]", "expected '{'");
    bad_dict("{'descr': '<f4', 'shape': (2, 3), }", "no 'fortran_order' key");
    bad_dict("{'fortran_order': False, 'shape': (2, 3), }", "no 'descr' key");
    bad_dict("{'descr': '<f4', 'fortran_order': False}", "no 'shape' key");
    bad_dict(npy_dict("<f4", "(2, 3)") + "x", "only padding after the closing '}'");
    bad_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'extra': 1}",
             "unexpected key 'extra'");
    bad_dict("{'descr': '<f4', 'shape': (6,), 'fortran_order': False, 'shape': (2, 3)}",
             "duplicate key 'shape'");
    bad_dict(npy_dict("<f4", "(6)"), "(n,)");
    bad_dict(npy_dict("<f4", "(-6,)"), "negative dimension");
    bad_dict(npy_dict("<f4", "[2, 3]"), "'(' opening the 'shape' tuple");
    bad_dict(npy_dict("<f4", "(2 3)"), "',' or ')'");
    bad_dict(npy_dict("<f4", "(2,, 3)"), "non-negative integer");
    bad_dict(npy_dict("<f4", "(99999999999999999999999,)"), "overflows");
    bad_dict("{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 3), }", "True or False");
    bad_dict("{'descr': '<f4', 'fortran_order': false, 'shape': (2, 3), }", "True or False");
    bad_dict("{'descr': '<f4, 'fortran_order': False, 'shape': (2, 3), }", "',' or '}'");
    bad_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), ", "a quoted key");
    bad_dict("{'descr' '<f4', 'fortran_order': False, 'shape': (2, 3), }", "':' after key");
    bad_dict("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2, 3), }",
             "quoted dtype descr");
    bad_dict("{'descr': '<f\\x34', 'fortran_order': False, 'shape': (2, 3), }",
             "plain ASCII string character");
    std::string many = "(";
    for (int i = 0; i < 65; ++i) many += "1, ";
    bad_dict(npy_dict("<f4", many + ")"), "more than 64 dimensions");
  }
  SUBCASE("dtypes other than float32 / float64") {
    for (const std::string descr : {"<i4", "<f2", "|u1", "<c8", "xf4", "<f4 ", "", "|O"}) {
      INFO("descr " << descr);
      check_bad(npy_file(npy_dict(descr, "(2, 3)"), six_floats),
                {"unsupported dtype descr '" + descr + "'", "float32 ('<f4')"});
    }
  }
  SUBCASE("declared size differs from the data") {
    check_bad(npy_file(npy_dict("<f4", "(2, 3)"), six_floats.substr(0, 20)),
              {"is truncated", "(2, 3)", "6 elements, 24 bytes", "only 20 data bytes"});
    check_bad(npy_file(npy_dict("<f4", "(2, 3)"), six_floats + "xyzw"),
              {"trailing data", "24 bytes", "28 data bytes"});
    check_bad(npy_file(npy_dict("<f4", "(4294967296, 4294967296, 2)"), six_floats),
              {"more elements than a 64-bit size can count"});
    check_bad(npy_file(npy_dict("<f4", "(4611686018427387904,)"), six_floats),
              {"more bytes than a 64-bit size can count"});
  }
}

TEST_CASE("npy: a header claiming a huge array fails before allocating it") {
  // 10^15 float64 elements are 8 PB: a reader that allocated before checking
  // the file size would throw std::bad_alloc here, not std::invalid_argument.
  // 2^28 float64 (2 GiB) could be allocated on an overcommitting system; a
  // reader that did so would then fail reading (std::runtime_error).
  TempDir dir;
  const fs::path file = dir / "huge.npy";
  write_file(file,
             npy_file(npy_dict("<f8", "(1000000, 1000000000)"), element_bytes<double>({1, 2})));
  CHECK_THROWS_WITH_PARTS(load_npy<double>(file), std::invalid_argument,
                          {"truncated", "1000000000000000 elements", "only 16 data bytes"});
  CHECK_THROWS_WITH_PARTS(read_npy_header(file), std::invalid_argument, {"truncated"});
  write_file(file, npy_file(npy_dict("<f8", "(268435456,)"), element_bytes<double>({1, 2})));
  CHECK_THROWS_WITH_PARTS(load_npy<double>(file), std::invalid_argument,
                          {"truncated", "268435456 elements"});
}

TEST_CASE("npy: an empty shape whose strides would overflow ptrdiff_t is refused") {
  // A zero dimension leaves no element, but xtensor still computes strides
  // and back-strides as std::ptrdiff_t products of the other dimensions; beside
  // a huge dimension they overflow (undefined behaviour). The rule: the
  // non-zero dimensions times the element size must not exceed 2^63 - 1.
  TempDir dir;
  const fs::path file = dir / "empty.npy";
  const auto load = [&](const std::string& descr) {
    return descr == "<f4" ? load_npy<float>(file).size() : load_npy<double>(file).size();
  };
  const auto refused = [&](const std::string& descr, const std::string& shape, bool fortran) {
    INFO(descr << " " << shape << (fortran ? " fortran order" : ""));
    write_file(file, npy_file(npy_dict(descr, shape, fortran), ""));
    CHECK_THROWS_WITH_PARTS(
        load(descr), std::invalid_argument,
        {"load_npy", "empty.npy", "shape " + shape, "does not fit array strides"});
    CHECK_THROWS_WITH_PARTS(read_npy_header(file), std::invalid_argument,
                            {"read_npy_header", "shape " + shape});
  };
  for (bool fortran : {false, true}) {
    refused("<f4", "(0, 9223372036854775808)", fortran);     // 2^63 alone is too large
    refused("<f4", "(0, 4611686018427387904, 4)", fortran);  // 2^62 * 4 * 4 bytes
    refused("<f8", "(1152921504606846976, 0)", fortran);     // 2^60 * 8 bytes = 2^63
    refused("<f4", "(0, 2305843009213693952)", fortran);     // 2^61 * 4 bytes = 2^63
    refused("<f8", "(0, 18446744073709551615)", fortran);    // 2^64 - 1 elements
    refused("<f4", "(3, 0, 768614336404564651)", fortran);  // 3 * 768614336404564651 * 4 > 2^63 - 1
  }
  // Just inside the limit: loads as an empty array of that shape.
  write_file(file, npy_file(npy_dict("<f8", "(0, 1152921504606846975)"), ""));  // (2^60 - 1) * 8
  const xt::xarray<double> d = load_npy<double>(file);
  CHECK(d.size() == 0);
  CHECK(d.shape() == xt::xarray<double>::shape_type{0, 1152921504606846975});
  write_file(file,
             npy_file(npy_dict("<f4", "(2305843009213693951, 0)", true), ""));  // (2^61 - 1) * 4
  const xt::xarray<float> f = load_npy<float>(file);
  CHECK(f.size() == 0);
  CHECK(f.shape() == xt::xarray<float>::shape_type{2305843009213693951, 0});
  write_file(file, npy_file(npy_dict("<f4", "(3, 0, 768614336404564650)"), ""));
  CHECK(read_npy_header(file).size == 0);
}

TEST_CASE("npy: the dtype must match T - no silent conversion") {
  TempDir dir;
  save_npy(dir / "d.npy", xt::xarray<double>{1.0, 2.0});
  save_npy(dir / "f.npy", xt::xarray<float>{1.0f, 2.0f});
  CHECK_THROWS_WITH_PARTS(load_npy<float>(dir / "d.npy"), std::invalid_argument,
                          {"d.npy", "has dtype float64 ('<f8')", "expected float32 ('<f4')"});
  CHECK_THROWS_WITH_PARTS(load_npy<double>(dir / "f.npy"), std::invalid_argument,
                          {"f.npy", "has dtype float32 ('<f4')", "expected float64 ('<f8')"});
  write_file(dir / "be.npy", npy_file(npy_dict(">f8", "(1,)"), element_bytes<double>({1}, true)));
  CHECK_THROWS_WITH_PARTS(load_npy<float>(dir / "be.npy"), std::invalid_argument,
                          {"has dtype float64 ('>f8')", "expected float32"});
}

TEST_CASE("npy: int32 and int64 arrays load as integers, each value within the target's range") {
  TempDir dir;
  const fs::path file = dir / "ids.npy";
  using I64 = xt::xarray<std::int64_t>;
  using I32 = xt::xarray<std::int32_t>;
  const double big = 1099511627776.0;  // 2^40, exact as a double
  write_file(file, npy_file(npy_dict("<i8", "(2, 3)"),
                            element_bytes<std::int64_t>({0, 5, -7, big, 3, 1})));
  CHECK(load_npy<std::int64_t>(file) == I64{{0, 5, -7}, {std::int64_t(1) << 40, 3, 1}});
  CHECK_THROWS_WITH_PARTS(load_npy<std::int32_t>(file), std::invalid_argument,
                          {"ids.npy", "holds 1099511627776 at element 3 (row-major)",
                           "outside the range of int32 [-2147483648, 2147483647]"});
  // Big-endian int32 widened to int64; Fortran order; an in-range int64 as int32.
  write_file(file,
             npy_file(npy_dict(">i4", "(3,)"), element_bytes<std::int32_t>({1, -2, 300}, true)));
  CHECK(load_npy<std::int64_t>(file) == I64{1, -2, 300});
  write_file(file,
             npy_file(npy_dict("<i4", "(2, 2)", true), element_bytes<std::int32_t>({1, 2, 3, 4})));
  CHECK(load_npy<std::int32_t>(file) == I32{{1, 3}, {2, 4}});
  write_file(file,
             npy_file(npy_dict("<i8", "(2,)"), element_bytes<std::int64_t>({-2147483648.0, 7})));
  CHECK(load_npy<std::int32_t>(file) == I32{-2147483648, 7});
  // No conversion between floating point and integers, either way.
  write_file(file, npy_file(npy_dict("<f4", "(1,)"), element_bytes<float>({1})));
  CHECK_THROWS_WITH_PARTS(load_npy<std::int64_t>(file), std::invalid_argument,
                          {"unsupported dtype descr '<f4'", "int32 ('<i4') or int64 ('<i8')"});
  write_file(file, npy_file(npy_dict("|u1", "(1,)"), std::string(1, '\1')));
  CHECK_THROWS_WITH_PARTS(load_npy<std::int64_t>(file), std::invalid_argument,
                          {"unsupported dtype descr '|u1'"});
  write_file(file, npy_file(npy_dict("<i8", "(1,)"), element_bytes<std::int64_t>({1})));
  CHECK_THROWS_WITH_PARTS(load_npy<double>(file), std::invalid_argument,
                          {"unsupported dtype descr '<i8'", "float32 ('<f4')"});
}

TEST_CASE("npy: I/O failures throw std::runtime_error naming the file") {
  TempDir dir;
  CHECK_THROWS_WITH_PARTS(load_npy<float>(dir / "absent.npy"), std::runtime_error,
                          {"load_npy", "cannot open", "absent.npy", "No such file"});
  CHECK_THROWS_WITH_PARTS(read_npy_header(dir / "absent.npy"), std::runtime_error,
                          {"read_npy_header", "absent.npy"});
  CHECK_THROWS_WITH_PARTS(load_npy<float>(dir.path()), std::runtime_error,
                          {"load_npy", "Is a directory", "not a regular file"});
  // A FIFO (opening it for reading would wait for a writer) and a socket
  // (which open() refuses with a misleading ENXIO) are named as what they are.
  REQUIRE(::mkfifo((dir / "fifo.npy").c_str(), 0600) == 0);
  CHECK_THROWS_WITH_PARTS(load_npy<float>(dir / "fifo.npy"), std::runtime_error,
                          {"load_npy", "fifo.npy", "Is a FIFO", "not a regular file"});
  testing::UnixSocket socket(dir / "socket.npy");
  CHECK_THROWS_WITH_PARTS(read_npy_header(dir / "socket.npy"), std::runtime_error,
                          {"read_npy_header", "socket.npy", "Is a socket", "not a regular file"});
  CHECK_THROWS_WITH_PARTS(save_npy(dir.path() / "", xt::xarray<float>{1.f}), std::invalid_argument,
                          {"save_npy", "names a directory"});
}

TEST_CASE("npy: every truncation and random corruption throws or loads, never crashes") {
  TempDir dir;
  const fs::path file = dir / "fuzz.npy";
  const std::string valid =
      npy_file(npy_dict("<f8", "(2, 3)"), element_bytes<double>({1, 2, 3, 4, 5, 6}));
  // Every proper prefix of a valid file is rejected as content, not I/O.
  for (std::size_t n = 0; n < valid.size(); ++n) {
    write_file(file, valid.substr(0, n));
    INFO("prefix of " << n << " bytes");
    CHECK_THROWS_AS(load_npy<double>(file), std::invalid_argument);
  }
  // Random bytes in the preamble and header: either a valid load of the
  // declared shape or std::invalid_argument; any other outcome (a crash, a
  // sanitizer report, bad_alloc) fails the test.
  std::mt19937 generator(2026);
  std::uniform_int_distribution<std::size_t> position(0, 63);
  std::uniform_int_distribution<int> byte(0, 255);
  std::size_t loaded = 0, rejected = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string bytes = valid;
    for (int flips = 1 + trial % 3; flips > 0; --flips)
      bytes[position(generator)] = static_cast<char>(byte(generator));
    write_file(file, bytes);
    try {
      const xt::xarray<double> a = load_npy<double>(file);
      CHECK(a.size() * sizeof(double) == bytes.size() - read_npy_header(file).data_offset);
      ++loaded;
    } catch (const std::invalid_argument&) {
      ++rejected;
    }
  }
  CHECK(loaded > 0);  // harmless flips (padding) still load
  CHECK(rejected > 0);
}

TEST_CASE("npy: numpy loads files written by save_npy") {
  const std::string python = python_with_numpy();
  if (python.empty()) {
    MESSAGE("SKIPPED: no python3 with numpy (tried /usr/bin/python3 and python3)");
    return;
  }
  TempDir dir;
  const xt::xarray<float> f = {{0.5f, -1.25f, 3.0f}, {0.004f, 5.0f, -6.0f}};
  const xt::xarray<double> d = testing::random_array<double>({2, 3, 4}, 7, -5.0, 5.0);
  save_npy(dir / "f.npy", f);
  save_npy(dir / "d.npy", d);
  save_npy(dir / "s.npy", xt::xarray<double>(3.25));
  save_npy(dir / "e.npy", xt::xarray<float>::from_shape({2, 0, 4}));

  // Expected values printed with enough digits to round-trip exactly.
  const auto literal = [](const auto& a, int digits) {
    std::ostringstream out;
    out.precision(digits);
    out << "[";
    for (std::size_t i = 0; i < a.size(); ++i) out << (i ? ", " : "") << double(a.data()[i]);
    out << "]";
    return out.str();
  };
  std::ostringstream script;
  script << "import numpy as np\n"
         << "def check(path, dtype, shape, flat):\n"
         << "    a = np.load(path)\n"
         << "    print(path, a.dtype, a.shape, a.ravel()[:6].tolist())\n"
         << "    assert a.dtype == np.dtype(dtype), (path, a.dtype)\n"
         << "    assert a.shape == shape, (path, a.shape)\n"
         << "    assert a.flags.c_contiguous\n"
         << "    e = np.array(flat, dtype=dtype).reshape(shape)\n"
         << "    assert np.allclose(a, e, rtol=0, atol=0) and np.array_equal(a, e), (path, a, e)\n"
         << "check('" << (dir / "f.npy").string() << "', 'float32', (2, 3), " << literal(f, 9)
         << ")\n"
         << "check('" << (dir / "d.npy").string() << "', 'float64', (2, 3, 4), " << literal(d, 17)
         << ")\n"
         << "check('" << (dir / "s.npy").string() << "', 'float64', (), [3.25])\n"
         << "check('" << (dir / "e.npy").string() << "', 'float32', (2, 0, 4), [])\n"
         << "print('numpy read all files')\n";
  write_file(dir / "check.py", script.str());
  const std::string command = python + " '" + (dir / "check.py").string() + "'";
  CHECK(std::system(command.c_str()) == 0);
}

TEST_CASE("npy: load_npy reads files written by numpy") {
  const std::string python = python_with_numpy();
  if (python.empty()) {
    MESSAGE("SKIPPED: no python3 with numpy (tried /usr/bin/python3 and python3)");
    return;
  }
  TempDir dir;
  const std::string d = dir.path().string();
  std::ostringstream script;
  script << "import numpy as np\n"
         << "d = '" << d << "'\n"
         << "a = np.arange(24, dtype=np.float64).reshape(2, 3, 4) * 0.5 - 3\n"
         << "np.save(d + '/c.npy', a)\n"
         << "np.save(d + '/f.npy', np.asfortranarray(a))\n"
         << "np.save(d + '/be.npy', a.astype('>f8'))\n"
         << "np.save(d + '/bef.npy', np.asfortranarray(a.astype('>f4')))\n"
         << "np.save(d + '/s.npy', np.float32(2.5))\n"
         << "np.save(d + '/e.npy', np.zeros((2, 0, 4), np.float32))\n"
         << "np.save(d + '/i.npy', np.arange(3, dtype=np.int32))\n"
         << "np.save(d + '/i64.npy', np.array([[3, -1], [2**40, 7]]))\n"
         << "with open(d + '/v2.npy', 'wb') as out:\n"
         << "    np.lib.format.write_array(out, a, version=(2, 0))\n";
  write_file(dir / "write.py", script.str());
  const std::string command = python + " '" + (dir / "write.py").string() + "'";
  REQUIRE(std::system(command.c_str()) == 0);

  xt::xarray<double> expected = xt::xarray<double>::from_shape({2, 3, 4});
  for (std::size_t i = 0; i < 2; ++i)
    for (std::size_t j = 0; j < 3; ++j)
      for (std::size_t k = 0; k < 4; ++k) expected(i, j, k) = (12.0 * i + 4.0 * j + k) * 0.5 - 3;
  for (const char* name : {"c.npy", "f.npy", "be.npy", "v2.npy"}) {
    INFO(name);
    CHECK(load_npy<double>(dir / name) == expected);
  }
  CHECK(read_npy_header(dir / "f.npy").fortran_order);
  CHECK(load_npy<float>(dir / "bef.npy") == xt::xarray<float>(expected));
  const xt::xarray<float> scalar = load_npy<float>(dir / "s.npy");
  CHECK(scalar.dimension() == 0);
  CHECK(scalar() == 2.5f);
  CHECK(load_npy<float>(dir / "e.npy").shape() == xt::xarray<float>::shape_type{2, 0, 4});
  CHECK_THROWS_WITH_PARTS(load_npy<float>(dir / "i.npy"), std::invalid_argument,
                          {"i.npy", "unsupported dtype descr '<i4'"});
  CHECK(load_npy<std::int64_t>(dir / "i.npy") == xt::xarray<std::int64_t>{0, 1, 2});
  CHECK(load_npy<std::int64_t>(dir / "i64.npy") ==
        xt::xarray<std::int64_t>{{3, -1}, {std::int64_t(1) << 40, 7}});  // NumPy's default int
}
