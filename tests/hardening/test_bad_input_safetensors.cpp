// The bad-input table of safetensors files: every way the header, the
// offsets and the data can be broken or hostile, each refused with
// std::invalid_argument (std::runtime_error for what is not a regular file)
// naming the file and what was wrong, before anything of a declared size is
// allocated. Files are built by hand (tests/support/safetensors_bytes.hpp).

#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <xtgrad/io/safetensors.hpp>

#include "support/bad_input.hpp"
#include "support/safetensors_bytes.hpp"
#include "support/test_helpers.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;
namespace fs = std::filesystem;

namespace {

struct BadFile {
  std::string label;
  std::string bytes;
  std::vector<std::string> parts;
};

// A file of one F32 tensor "a" of shape [2] (8 bytes) with `extra` entries after it.
std::string one(const std::string& extra = "") {
  return safetensors_file("{" + entry("a", "F32", "2", 0, 8) + extra + "}", std::string(8, '\0'));
}

// A header {"a": <value>} with the data `data`.
std::string with_a(const std::string& value, const std::string& data = "") {
  return safetensors_file("{\"a\":" + value + "}", data);
}

std::string info(const std::string& dtype, const std::string& shape, const std::string& offsets) {
  return "{\"dtype\":" + dtype + ",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}";
}

}  // namespace

TEST_CASE("bad input: safetensors files") {
  TempDir dir("bad-safetensors");
  const std::string eight(8, '\0');
  const std::string a_header = "{" + entry("a", "F32", "2", 0, 8) + "}";
  const std::string nul_at = "byte " + std::to_string(a_header.size()) + " of the header (offset " +
                             std::to_string(a_header.size() + 8) + " in the file)";
  std::string deep = "[";
  for (int i = 0; i < 65; ++i) deep += i ? ",1" : "1";
  deep += "]";
  const std::vector<BadFile> files = {
      {"shorter than the length prefix", "abc", {"has 3 bytes", "too short"}},
      {"a header over 100 MB",
       le64(100'000'001) + "{}",
       {"header length 100000001", "exceeds the limit of 100000000 bytes"}},
      {"a header length of 2^64 - 1", le64(~0ull) + "{}", {"exceeds the limit"}},
      {"a header at the limit but past the end of the file",
       le64(100'000'000) + "{}",
       {"header length 100000000", "runs past the end of the file (10 bytes)"}},
      {"a header past the end", le64(100) + "{}", {"runs past the end"}},
      {"an empty header", le64(0), {"does not start with '{'"}},
      {"a header that starts with a space",
       safetensors_file(" {}"),
       {"does not start with '{'", "' {}'"}},
      {"a header that is an array", safetensors_file("[1]"), {"does not start with '{'"}},
      {"malformed JSON", safetensors_file("{\"a\":"), {"header is not valid JSON"}},
      {"JSON followed by more than spaces",
       safetensors_file("{} x"),
       {"header: byte 3 of the header (offset 11 in the file), after the JSON object that ends "
        "at byte 2, is 'x', expected only whitespace (space, tab, CR, LF"}},
      {"two objects", safetensors_file("{}{}"), {"byte 2 of the header", "is '{'"}},
      // nlohmann's lexer ends its input at a NUL: what follows must not be lost.
      {"a NUL byte hiding a second object",
       safetensors_file(a_header + std::string(1, '\0') + "{" + entry("b", "F32", "2", 0, 8) + "}",
                        eight),
       {"header: " + nul_at + ", after the JSON object that ends at byte " +
            std::to_string(a_header.size()) + ", is a NUL byte, expected only whitespace",
        "(" + std::to_string(a_header.size() + 1 + a_header.size()) + " bytes)"}},
      {"a NUL byte hiding garbage",
       safetensors_file(std::string("{}\0GARBAGE", 10)),
       {"header: byte 2 of the header (offset 10 in the file)", "is a NUL byte"}},
      {"spaces, then a NUL byte",
       safetensors_file(std::string("{} \t\r\n\0", 7)),
       {"byte 6 of the header", "that ends at byte 2, is a NUL byte"}},
      {"a NUL byte inside the object",
       safetensors_file(std::string("{\"a\":\0}", 7)),
       {"header: byte 5 of the header (offset 13 in the file) is a NUL byte inside the JSON "
        "object"}},
      {"a NUL byte inside a name",
       safetensors_file(std::string("{\"a\0b\":{}}", 9)),
       {"byte 3 of the header", "is a NUL byte inside the JSON object"}},
      {"a name that is not UTF-8", safetensors_file("{\"\xff\":{}}"), {"not valid JSON", "\\xff"}},
      {"an entry that is a number",
       with_a("3"),
       {"tensor 'a'", "is a number", "expected an object {dtype, shape, data_offsets}"}},
      {"an entry that is null", with_a("null"), {"tensor 'a'", "is null"}},
      {"a duplicate name",
       safetensors_file(
           "{" + entry("a", "F32", "1", 0, 4) + "," + entry("a", "F32", "1", 4, 8) + "}", eight),
       {"duplicate name 'a'"}},
      {"a duplicate key in an entry",
       with_a("{\"dtype\":\"F32\",\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[0,4]}"),
       {"tensor 'a'", "has the key 'dtype' twice"}},
      {"an unknown key in an entry",
       with_a("{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"extra\":1}"),
       {"tensor 'a'", "unknown key 'extra'"}},
      {"an entry without data_offsets",
       with_a("{\"dtype\":\"F32\",\"shape\":[1]}"),
       {"tensor 'a'", "has no data_offsets"}},
      {"an entry without dtype",
       with_a("{\"shape\":[1],\"data_offsets\":[0,4]}"),
       {"has no dtype"}},
      {"an unsupported dtype",
       with_a(info("\"I32\"", "[1]", "[0,4]"), "abcd"),
       {"tensor 'a'", "unsupported dtype 'I32'", "expected F32, F64, F16 or BF16"}},
      {"a dtype that is a number", with_a(info("32", "[1]", "[0,4]")), {"dtype is a number"}},
      {"a negative dimension",
       with_a(info("\"F32\"", "[-1]", "[0,4]")),
       {"shape contains a negative integer", "expected unsigned integers"}},
      {"a fractional dimension",
       with_a(info("\"F32\"", "[2.5]", "[0,4]")),
       {"shape contains a number that is not an unsigned 64-bit integer"}},
      {"a dimension past 2^64",
       with_a(info("\"F32\"", "[18446744073709551616]", "[0,4]")),
       {"not an unsigned 64-bit integer"}},
      {"a nested shape", with_a(info("\"F32\"", "[[1]]", "[0,4]")), {"shape contains an array"}},
      {"a boolean dimension",
       with_a(info("\"F32\"", "[true]", "[0,4]")),
       {"shape contains a boolean"}},
      {"a shape that is a string",
       with_a(info("\"F32\"", "\"1\"", "[0,4]")),
       {"shape is a string", "expected an array"}},
      {"65 dimensions", with_a(info("\"F32\"", deep, "[0,4]")), {"more than 64 dimensions"}},
      {"one data offset",
       with_a(info("\"F32\"", "[1]", "[4]")),
       {"data_offsets has 1 number, expected 2"}},
      {"no data offsets",
       with_a(info("\"F32\"", "[1]", "[]")),
       {"data_offsets has 0 numbers, expected 2"}},
      {"three data offsets",
       with_a(info("\"F32\"", "[1]", "[0,4,8]")),
       {"data_offsets has more than 2 numbers"}},
      {"metadata that is a string",
       safetensors_file("{\"__metadata__\":\"pt\"}"),
       {"__metadata__: is a string, expected an object of string values"}},
      {"metadata that is null",
       safetensors_file("{\"__metadata__\":null}"),
       {"__metadata__: is null"}},
      {"metadata that is an array",
       safetensors_file("{\"__metadata__\":[\"a\"]}"),
       {"__metadata__: is an array"}},
      {"a metadata value that is a number",
       safetensors_file("{\"__metadata__\":{\"k\":1}}"),
       {"__metadata__: the value of 'k' is a number, expected a string"}},
      {"a metadata value that is an object",
       safetensors_file("{\"__metadata__\":{\"k\":{}}}"),
       {"the value of 'k' is an object"}},
      {"a duplicate metadata key",
       safetensors_file("{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}}"),
       {"__metadata__: has the key 'k' twice"}},
      {"two __metadata__",
       safetensors_file("{\"__metadata__\":{},\"__metadata__\":{}}"),
       {"duplicate name '__metadata__'"}},
      {"a gap before the first tensor",
       safetensors_file("{" + entry("a", "F32", "1", 4, 8) + "}", eight),
       {"the data has a gap: bytes [0, 4) belong to no tensor", "'a'"}},
      {"a gap between tensors",
       safetensors_file(
           "{" + entry("a", "F32", "1", 0, 4) + "," + entry("b", "F32", "1", 8, 12) + "}",
           std::string(12, '\0')),
       {"gap: bytes [4, 8)", "'b'"}},
      {"overlapping tensors",
       safetensors_file(
           "{" + entry("a", "F32", "2", 0, 8) + "," + entry("b", "F32", "2", 4, 12) + "}",
           std::string(12, '\0')),
       {"tensor 'b'", "data_offsets [4, 12] overlap those of tensor 'a' (data_offsets [0, 8])"}},
      {"the same bytes twice",
       safetensors_file(
           "{" + entry("a", "F32", "2", 0, 8) + "," + entry("b", "F32", "2", 0, 8) + "}", eight),
       {"overlap"}},
      {"offsets that end before they begin",
       safetensors_file("{" + entry("a", "F32", "1", 8, 4) + "}", eight),
       {"tensor 'a'", "data_offsets [8, 4] end before they begin"}},
      {"a byte count that disagrees with the shape",
       safetensors_file("{" + entry("a", "F32", "2,3", 0, 20) + "}", std::string(20, '\0')),
       {"tensor 'a'", "data_offsets [0, 20] hold 20 bytes, but shape [2, 3] of F32 has 24"}},
      {"a byte count that disagrees with the dtype",
       safetensors_file("{" + entry("a", "F64", "2", 0, 8) + "}", eight),
       {"hold 8 bytes, but shape [2] of F64 has 16"}},
      {"a shape whose element count overflows",
       with_a(info("\"F32\"", "[4294967296,4294967296,2]", "[0,8]"), eight),
       {"shape [4294967296, 4294967296, 2] of F32 has more elements than a 64-bit size counts"}},
      {"a shape whose byte count overflows",
       with_a(info("\"F64\"", "[2305843009213693952]", "[0,0]")),
       {"does not fit array strides", "times 8 bytes"}},
      {"an empty shape whose strides overflow",
       with_a(info("\"F32\"", "[0,4611686018427387904,4]", "[0,0]")),
       {"does not fit array strides", "even though it has no elements"}},
      {"a F16 shape whose float strides overflow",
       with_a(info("\"F16\"", "[0,3458764513820540928]", "[0,0]")),
       {"times 4 bytes"}},
      {"data past the end of the file",
       safetensors_file("{" + entry("a", "F32", "2", 0, 8) + "}", "abcd"),
       {"is truncated: the tensors take 8 data bytes but only 4 follow the header"}},
      {"4 TB declared in a file of a few bytes",
       safetensors_file("{" + entry("a", "F32", "1000000000000", 0, 4000000000000) + "}"),
       {"is truncated: the tensors take 4000000000000 data bytes but only 0"}},
      {"trailing bytes after the last tensor",
       safetensors_file("{" + entry("a", "F32", "2", 0, 8) + "}", eight + "xy"),
       {"has trailing data: the tensors take 8 data bytes but 10 follow"}},
      {"bytes but no tensors", safetensors_file("{}", "x"), {"has trailing data"}},
      {"a second entry that is broken", one(",\"b\":[]"), {"tensor 'b'", "is an array"}},
  };

  std::vector<Row> rows;
  for (std::size_t i = 0; i < files.size(); ++i) {
    const fs::path path = dir / ("f" + std::to_string(i) + ".safetensors");
    write_file(path, files[i].bytes);
    std::vector<std::string> parts = {"xtgrad::read_safetensors: file", path.filename().string()};
    parts.insert(parts.end(), files[i].parts.begin(), files[i].parts.end());
    rows.push_back(
        {files[i].label, [path] { read_safetensors(path); }, Expect::invalid_argument, parts});
  }
  fs::create_directories(dir / "folder");
  const UnixSocket socket(dir / "socket");
  rows.push_back({"a missing file",
                  [&] { read_safetensors(dir / "absent.safetensors"); },
                  Expect::runtime_error,
                  {"read_safetensors", "cannot open", "No such file"}});
  rows.push_back({"a directory",
                  [&] { read_safetensors(dir / "folder"); },
                  Expect::runtime_error,
                  {"read_safetensors", "Is a directory"}});
  rows.push_back({"a socket",
                  [&] { read_safetensors(dir / "socket"); },
                  Expect::runtime_error,
                  {"read_safetensors", "not a regular file"}});
  auto snapshot = [&] {
    State s;
    for (const std::string& name : directory_listing(dir.path())) s.add(name);
    return s;
  };
  report("safetensors", run_rows(rows, snapshot));
  // The well-formed neighbours of these files load.
  write_file(dir / "good.safetensors", one());
  CHECK(read_safetensors(dir / "good.safetensors").tensors.size() == 1);
  write_file(dir / "empty.safetensors", safetensors_file("{}"));
  CHECK(read_safetensors(dir / "empty.safetensors").tensors.empty());
  write_file(dir / "padded.safetensors", safetensors_file("{\"__metadata__\":{}}      "));
  CHECK(read_safetensors(dir / "padded.safetensors").metadata.empty());
  // Any JSON whitespace pads, as serde_json accepts it after the object.
  write_file(dir / "whitespace.safetensors", safetensors_file(a_header + " \t\r\n ", eight));
  CHECK(read_safetensors(dir / "whitespace.safetensors").tensors.size() == 1);
}

TEST_CASE("bad input: a safetensors header of more than 100,000 tensors is refused") {
  TempDir dir("many-safetensors");
  // Empty tensors: a few bytes of header each and no data.
  const auto tensors = [](std::size_t n) {
    std::string json = "{\"__metadata__\":{\"format\":\"pt\"}";
    for (std::size_t i = 0; i < n; ++i)
      json += "," + entry("t" + std::to_string(i), "F32", "0", 0, 0);
    return safetensors_file(json + "}");
  };
  write_file(dir / "at_limit.safetensors", tensors(100'000));
  const Safetensors at_limit = read_safetensors(dir / "at_limit.safetensors");
  CHECK(at_limit.tensors.size() == 100'000);
  CHECK(at_limit.metadata.at("format") == "pt");
  write_file(dir / "over_limit.safetensors", tensors(100'001));
  CHECK_THROWS_WITH_PARTS(read_safetensors(dir / "over_limit.safetensors"), std::invalid_argument,
                          {"xtgrad::read_safetensors: file", "over_limit.safetensors",
                           "header declares more than 100000 tensors, the limit per file"});
}
