// The bad-input table of IDX files (io/idx.hpp): every malformed,
// truncated, oversized or hostile file is refused with the documented
// exception naming load_idx, the file and what is wrong, and leaves the
// directory as it was. The files are built byte by byte (support/idx_bytes.hpp).

#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <xtgrad/io/idx.hpp>

#include "support/bad_input.hpp"
#include "support/idx_bytes.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;
namespace fs = std::filesystem;

TEST_CASE("bad input: IDX files") {
  TempDir dir("bad-idx");
  const std::string good = idx_u8({2, 3}, "abcdef");
  const std::string good_gz = gzip(good);
  auto file = [&](const std::string& name, const std::string& bytes) {
    write_file(dir / name, bytes);
    return dir / name;
  };
  std::string corrupt_crc = good_gz;
  corrupt_crc[corrupt_crc.size() - 6] ^= 0x01;  // a byte of the CRC-32 of the trailer
  const std::string huge4 = idx_header(0x08, {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu});

  const std::vector<std::pair<fs::path, std::string>> files = {
      {file("empty", ""), ""},
      {file("short_magic", std::string("\0\0", 2)), ""},
      {file("bad_magic", "PK\x03\x04"), ""},
      {file("bad_type", idx_header(0x07, {1}) + "x"), ""},
      {file("no_dims", idx_header(0x08, {})), ""},
      {file("nine_dims", idx_header(0x08, std::vector<std::uint32_t>(9, 1)) + "x"), ""},
      {file("short_dims", idx_header(0x08, {2, 3}).substr(0, 9)), ""},
      {file("over_bound", idx_u8({3, 4}, "abcdefghijkl")), ""},
      {file("overflow", huge4), ""},
      {file("overflow_empty", idx_header(0x08, {0, 0xffffffffu, 0xffffffffu, 0xffffffffu})), ""},
      {file("raw_truncated", good.substr(0, good.size() - 1)), ""},
      {file("raw_trailing", good + "g"), ""},
      {file("f32", idx_header(0x0D, {1}) + std::string(4, '\0')), ""},
      {file("gz_truncated", good_gz.substr(0, good_gz.size() - 9)), ""},
      {file("gz_short_data", gzip(idx_u8({2, 3}, "abcde"))), ""},
      {file("gz_long_data", gzip(idx_u8({2, 3}, "abcdefg"))), ""},
      {file("gz_trailing_junk", good_gz + "junk"), ""},
      {file("gz_two_members", good_gz + gzip("x")), ""},
      {file("gz_corrupt_crc", corrupt_crc), ""},
      {file("gz_garbage", std::string("\x1f\x8b", 2) + "not deflate at all"), ""},
      {file("gz_huge_claim", gzip(idx_header(0x08, {1u << 15, 1u << 15}) + "tiny")), ""},
  };
  (void)files;
  const std::vector<Row> rows = {
      {"a missing file",
       [&] { load_idx<std::uint8_t>(dir / "absent.gz"); },
       Expect::runtime_error,
       {"load_idx", "absent.gz", "cannot open", "No such file"}},
      {"a directory",
       [&] { load_idx<std::uint8_t>(dir.path()); },
       Expect::runtime_error,
       {"load_idx", "Is a directory"}},
      {"read_idx_header: a missing file",
       [&] { read_idx_header(dir / "absent"); },
       Expect::runtime_error,
       {"read_idx_header", "absent", "No such file"}},
      {"an empty file",
       [&] { load_idx<std::uint8_t>(dir / "empty"); },
       Expect::invalid_argument,
       {"load_idx", "'", "empty'", "truncated in its magic number"}},
      {"two bytes",
       [&] { load_idx<std::uint8_t>(dir / "short_magic"); },
       Expect::invalid_argument,
       {"short_magic", "truncated in its magic number"}},
      {"another format",
       [&] { load_idx<std::uint8_t>(dir / "bad_magic"); },
       Expect::invalid_argument,
       {"bad_magic", "is not an IDX file", "expected 0, 0"}},
      {"an unknown element type",
       [&] { load_idx<std::uint8_t>(dir / "bad_type"); },
       Expect::invalid_argument,
       {"bad_type", "element type 0x07", "expected one of"}},
      {"no dimensions",
       [&] { load_idx<std::uint8_t>(dir / "no_dims"); },
       Expect::invalid_argument,
       {"no_dims", "has 0 dimensions, expected 1 to 8"}},
      {"nine dimensions",
       [&] { load_idx<std::uint8_t>(dir / "nine_dims"); },
       Expect::invalid_argument,
       {"nine_dims", "has 9 dimensions"}},
      {"dimensions cut short",
       [&] { load_idx<std::uint8_t>(dir / "short_dims"); },
       Expect::invalid_argument,
       {"short_dims", "truncated in its dimensions"}},
      {"more elements than the caller's bound",
       [&] { load_idx<std::uint8_t>(dir / "over_bound", 11); },
       Expect::invalid_argument,
       {"over_bound", "shape 3 x 4", "more than the bound of 11 elements"}},
      {"dimensions whose product overflows",
       [&] { load_idx<std::uint8_t>(dir / "overflow"); },
       Expect::invalid_argument,
       {"overflow", "4294967295 x 4294967295", "more than the bound"}},
      {"an empty shape whose other dimensions overflow",
       [&] { load_idx<std::uint8_t>(dir / "overflow_empty"); },
       Expect::invalid_argument,
       {"overflow_empty", "non-zero dimensions multiply to more than the bound"}},
      {"read_idx_header applies the bound too",
       [&] { read_idx_header(dir / "over_bound", 11); },
       Expect::invalid_argument,
       {"read_idx_header", "more than the bound of 11"}},
      {"raw data one byte short",
       [&] { load_idx<std::uint8_t>(dir / "raw_truncated"); },
       Expect::invalid_argument,
       {"raw_truncated", "is truncated", "needs 6 data bytes, the file has 5"}},
      {"raw data one byte long",
       [&] { load_idx<std::uint8_t>(dir / "raw_trailing"); },
       Expect::invalid_argument,
       {"raw_trailing", "is too long", "needs 6 data bytes, the file has 7"}},
      {"another element type than asked",
       [&] { load_idx<std::uint8_t>(dir / "f32"); },
       Expect::invalid_argument,
       {"f32", "has element type float32 (0x0d), expected unsigned byte (0x08)"}},
      {"a gzip stream cut short",
       [&] { load_idx<std::uint8_t>(dir / "gz_truncated"); },
       Expect::invalid_argument,
       {"gz_truncated", "truncated"}},
      {"gzip: less data than the header says",
       [&] { load_idx<std::uint8_t>(dir / "gz_short_data"); },
       Expect::invalid_argument,
       {"gz_short_data", "is truncated", "needs 6 data bytes, the file has 5"}},
      {"gzip: more data than the header says",
       [&] { load_idx<std::uint8_t>(dir / "gz_long_data"); },
       Expect::invalid_argument,
       {"gz_long_data", "has data after the elements its header declares"}},
      {"gzip: bytes after the stream",
       [&] { load_idx<std::uint8_t>(dir / "gz_trailing_junk"); },
       Expect::invalid_argument,
       {"gz_trailing_junk", "bytes after the end of its gzip stream"}},
      {"gzip: a second member",
       [&] { load_idx<std::uint8_t>(dir / "gz_two_members"); },
       Expect::invalid_argument,
       {"gz_two_members", "bytes after the end of its gzip stream"}},
      {"gzip: a corrupt CRC",
       [&] { load_idx<std::uint8_t>(dir / "gz_corrupt_crc"); },
       Expect::invalid_argument,
       {"gz_corrupt_crc", "is not a valid gzip stream", "zlib"}},
      {"gzip: not deflate data",
       [&] { load_idx<std::uint8_t>(dir / "gz_garbage"); },
       Expect::invalid_argument,
       {"gz_garbage", "is not a valid gzip stream"}},
      {"gzip: a tiny file claiming a gigabyte",
       [&] { load_idx<std::uint8_t>(dir / "gz_huge_claim"); },
       Expect::invalid_argument,
       {"gz_huge_claim", "is truncated", "needs 1073741824 data bytes, the file has 4"}},
  };
  auto snapshot = [&] {
    State s;
    for (const std::string& name : directory_listing(dir.path())) s.add(name);
    return s;
  };
  MESSAGE(run_rows(rows, snapshot) << " rows");
}
