// IDX files (io/idx.hpp), raw and gzip-compressed. Expected values
// are written here from the format description, byte by byte
// (support/idx_bytes.hpp); the bad files are in hardening/test_bad_input_idx.cpp.

#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include <xtgrad/io/idx.hpp>

#include "support/idx_bytes.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;
namespace fs = std::filesystem;

TEST_CASE("idx: unsigned bytes, raw and gzip, give the same array") {
  TempDir dir("idx");
  // Two 2 x 3 "images": 0 1 2 / 3 4 5 and 250 251 252 / 253 254 255.
  const std::string data = std::string("\x00\x01\x02\x03\x04\x05", 6) + "\xfa\xfb\xfc\xfd\xfe\xff";
  const std::string file = idx_u8({2, 2, 3}, data);
  write_file(dir / "images-idx3-ubyte", file);
  write_file(dir / "images-idx3-ubyte.gz", gzip(file));
  for (const char* name : {"images-idx3-ubyte", "images-idx3-ubyte.gz"}) {
    INFO(name);
    const xt::xarray<std::uint8_t> a = load_idx<std::uint8_t>(dir / name);
    REQUIRE(a.shape() == std::vector<std::size_t>{2, 2, 3});
    CHECK(a(0, 0, 0) == 0);
    CHECK(a(0, 1, 2) == 5);
    CHECK(a(1, 0, 0) == 250);
    CHECK(a(1, 1, 2) == 255);
    const IdxHeader h = read_idx_header(dir / name);
    CHECK(h.type == IdxType::u8);
    CHECK(h.shape == std::vector<std::size_t>{2, 2, 3});
    CHECK(h.size == 12);
    CHECK(h.gzip == (fs::path(name).extension() == ".gz"));
  }
}

TEST_CASE("idx: wider types are big-endian") {
  TempDir dir("idx-types");
  // int16 -2 = ff fe, 258 = 01 02.
  write_file(dir / "i16", idx_header(0x0B, {2}) + std::string("\xff\xfe\x01\x02", 4));
  const auto i16 = load_idx<std::int16_t>(dir / "i16");
  CHECK(i16(0) == -2);
  CHECK(i16(1) == 258);
  // int32 0x01020304 = 16909060, -1.
  write_file(dir / "i32",
             gzip(idx_header(0x0C, {2}) + std::string("\x01\x02\x03\x04\xff\xff\xff\xff", 8)));
  const auto i32 = load_idx<std::int32_t>(dir / "i32");
  CHECK(i32(0) == 16909060);
  CHECK(i32(1) == -1);
  // float32 1.5 = 3f c0 00 00, -0.25 = be 80 00 00.
  write_file(dir / "f32",
             idx_header(0x0D, {1, 2}) + std::string("\x3f\xc0\x00\x00\xbe\x80\x00\x00", 8));
  const auto f32 = load_idx<float>(dir / "f32");
  CHECK(f32.shape() == std::vector<std::size_t>{1, 2});
  CHECK(f32(0, 0) == 1.5f);
  CHECK(f32(0, 1) == -0.25f);
  // float64 -3.0 = c0 08 00 00 00 00 00 00.
  write_file(dir / "f64",
             idx_header(0x0E, {1}) + std::string("\xc0\x08\x00\x00\x00\x00\x00\x00", 8));
  CHECK(load_idx<double>(dir / "f64")(0) == -3.0);
  // signed byte 0x80 = -128.
  write_file(dir / "i8", idx_header(0x09, {1}) + std::string("\x80", 1));
  CHECK(load_idx<std::int8_t>(dir / "i8")(0) == -128);
}

TEST_CASE("idx: an empty array, a bound met exactly, and data larger than one chunk") {
  TempDir dir("idx-edges");
  write_file(dir / "empty.gz", gzip(idx_u8({0, 28, 28}, "")));
  const auto empty = load_idx<std::uint8_t>(dir / "empty.gz");
  CHECK(empty.shape() == std::vector<std::size_t>{0, 28, 28});
  CHECK(empty.size() == 0);
  write_file(dir / "six", idx_u8({2, 3}, "abcdef"));
  CHECK(load_idx<std::uint8_t>(dir / "six", 6).size() == 6);
  // 300,000 bytes: several reads of compressed input and a growing buffer.
  std::string big(300000, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 7919) % 251);
  write_file(dir / "big.gz", gzip(idx_u8({300, 1000}, big)));
  const auto a = load_idx<std::uint8_t>(dir / "big.gz");
  REQUIRE(a.size() == big.size());
  bool equal = true;
  for (std::size_t i = 0; i < big.size(); ++i)
    equal = equal && a.data()[i] == static_cast<std::uint8_t>(big[i]);
  CHECK(equal);
}

TEST_CASE("idx: Debian's Fashion-MNIST files, when installed, have the documented shapes") {
  const fs::path dir = "/usr/share/datasets/fashion-mnist";
  if (!fs::exists(dir / "t10k-labels-idx1-ubyte.gz")) {
    MESSAGE("dataset-fashion-mnist is not installed; nothing to check");
    return;
  }
  const IdxHeader images = read_idx_header(dir / "train-images-idx3-ubyte.gz");
  CHECK(images.gzip);
  CHECK(images.shape == std::vector<std::size_t>{60000, 28, 28});
  const auto labels = load_idx<std::uint8_t>(dir / "t10k-labels-idx1-ubyte.gz");
  REQUIRE(labels.size() == 10000);
  std::size_t per_class[10] = {};
  for (const std::uint8_t l : labels) {
    REQUIRE(l < 10);
    ++per_class[l];
  }
  for (std::size_t c = 0; c < 10; ++c) CHECK(per_class[c] == 1000);  // balanced, as published
}
