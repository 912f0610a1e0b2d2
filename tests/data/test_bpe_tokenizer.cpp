// BpeTokenizer against encoder.py's algorithm (tests/support/fixtures/make_bpe.py):
// the edge cases of the four pre-tokenizer patterns, special tokens, decode's
// errors="replace", the fortunes corpus (when the Debian package is
// installed), and hostile files.

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <xtgrad/data/data.hpp>

#include "support/fixtures/bpe_fixtures.hpp"
#include "support/test_helpers.hpp"

namespace fs = std::filesystem;
using xtgrad::BpeTokenizer;
using xtgrad::PreTokenizer;
using xtgrad::SpecialTokens;
using xtgrad::testing::TempDir;
namespace fx = xtgrad::fixtures::bpe;

namespace {

const fs::path k_fixtures = fs::path(XTGRAD_SOURCE_DIR) / "tests/support/fixtures/bpe";

std::vector<std::int64_t> ids_of(const fx::Span& span) {
  return std::vector<std::int64_t>(fx::ids + span.begin, fx::ids + span.end);
}

std::string text_of(const fx::EdgeCase& c) {
  return std::string(c.text, c.size);
}

// The pieces of c's text whose byte lengths `span` lists.
std::vector<std::string> pieces_of(const fx::EdgeCase& c, const fx::Span& span) {
  std::vector<std::string> out;
  std::size_t at = 0;
  for (std::size_t i = span.begin; i < span.end; at += fx::pieces[i++])
    out.push_back(text_of(c).substr(at, fx::pieces[i]));
  return out;
}

// FNV-1a over each id as 4 little-endian bytes, each line ended by 0xffffffff.
struct IdHash {
  std::uint64_t h = 0xcbf29ce484222325ull;
  void add(std::uint32_t v) {
    for (int i = 0; i < 4; ++i) h = (h ^ ((v >> (8 * i)) & 0xff)) * 0x100000001b3ull;
  }
};

std::uint64_t fnv1a(const std::string& text) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// The fortunes corpus as make_bpe.py reads it, or no lines.
std::vector<std::string> fortunes_lines() {
  const fs::path dir = "/usr/share/games/fortunes";
  std::vector<std::string> lines;
  std::error_code error;
  if (!fs::is_directory(dir, error)) return lines;
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().filename().string().find('.') == std::string::npos && !entry.is_symlink() &&
        entry.is_regular_file())
      names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    const std::string text = xtgrad::testing::read_file(dir / name);
    for (std::size_t at = 0; at < text.size();) {
      std::size_t end = text.find('\n', at);
      end = end == std::string::npos ? text.size() : end + 1;
      lines.push_back(text.substr(at, end - at));
      at = end;
    }
  }
  return lines;
}

}  // namespace

TEST_CASE("bpe: the GPT-2 files and the tokenizer.json forms load") {
  const BpeTokenizer files = BpeTokenizer::from_pretrained(k_fixtures / "gpt2");
  CHECK(files.vocab_size() == fx::vocab_size);
  CHECK(files.merges() == fx::merges);
  CHECK(files.pre_tokenizer() == PreTokenizer::gpt2);
  REQUIRE(files.added_tokens().size() == 1);
  CHECK(files.added_tokens()[0].content == "<|endoftext|>");
  CHECK(files.token_to_id("<|endoftext|>") == std::int64_t(fx::vocab_size - 1));
  CHECK(files.id_to_token(32) == "\xc4\xa0");  // "Ġ", the space
  CHECK_FALSE(files.token_to_id("no such token").has_value());
  const std::pair<const char*, PreTokenizer> forms[] = {{"gpt2_json", PreTokenizer::gpt2},
                                                        {"llama3", PreTokenizer::llama3},
                                                        {"qwen2", PreTokenizer::qwen2},
                                                        {"smollm", PreTokenizer::gpt2_digits}};
  for (const auto& form : forms) {
    // not structured bindings: doctest's message macros capture them in lambdas (not C++17)
    const auto& dir = form.first;
    const auto& pattern = form.second;
    CAPTURE(dir);
    const BpeTokenizer t = BpeTokenizer::from_pretrained(k_fixtures / dir);
    CHECK(t.pre_tokenizer() == pattern);
    CHECK(t.merges() == fx::merges);
  }
  CHECK(BpeTokenizer::from_pretrained(k_fixtures / "llama3").added_tokens().size() == 3);
}

TEST_CASE("bpe: edge cases equal encoder.py's ids and pieces, and round-trip") {
  const BpeTokenizer gpt2 =
      BpeTokenizer::from_gpt2_files(k_fixtures / "gpt2/vocab.json", k_fixtures / "gpt2/merges.txt");
  const BpeTokenizer gpt2_json = BpeTokenizer::from_pretrained(k_fixtures / "gpt2_json");
  const BpeTokenizer llama3 = BpeTokenizer::from_pretrained(k_fixtures / "llama3");
  const BpeTokenizer qwen2 = BpeTokenizer::from_pretrained(k_fixtures / "qwen2");
  const BpeTokenizer smollm = BpeTokenizer::from_pretrained(k_fixtures / "smollm");
  for (const fx::EdgeCase& c : fx::edge_cases) {
    const std::string text = text_of(c);
    CAPTURE(text);
    CHECK(gpt2.encode(text) == ids_of(c.ids[0]));
    CHECK(gpt2_json.encode(text) == ids_of(c.ids[0]));
    CHECK(llama3.encode(text) == ids_of(c.ids[1]));
    if (c.nfc)
      CHECK(qwen2.encode(text) == ids_of(c.ids[2]));
    else
      CHECK_THROWS_WITH_PARTS(
          qwen2.encode(text), std::invalid_argument,
          {"BpeTokenizer::encode: argument 'text' has U+", "normalize it to NFC"});
    CHECK(smollm.encode(text) == ids_of(c.ids[3]));
    CHECK(gpt2.encode(text, SpecialTokens::as_text) == ids_of(c.ids[4]));
    CHECK(gpt2.pre_tokenize(text) == pieces_of(c, c.pieces[0]));
    CHECK(llama3.pre_tokenize(text) == pieces_of(c, c.pieces[1]));
    for (const BpeTokenizer* t : {&gpt2, &llama3, &smollm})
      CHECK(t->decode(t->encode(text)) == text);
    if (c.nfc) CHECK(qwen2.decode(qwen2.encode(text)) == text);
    CHECK(gpt2.decode(ids_of(c.ids[4])) == text);
  }
}

TEST_CASE("bpe: special tokens are matched, encoded as text or refused") {
  const BpeTokenizer t = BpeTokenizer::from_pretrained(k_fixtures / "llama3");
  const std::int64_t bot = *t.token_to_id("<|begin_of_text|>");
  const std::int64_t eot = *t.token_to_id("<|eot_id|>");
  const std::vector<std::int64_t> ids = t.encode("<|begin_of_text|>Hi<|eot_id|>");
  REQUIRE(ids.size() >= 3);
  CHECK(ids.front() == bot);
  CHECK(ids.back() == eot);
  CHECK(t.decode(ids) == "<|begin_of_text|>Hi<|eot_id|>");
  CHECK(t.decode(ids, /*skip_special_tokens=*/true) == "Hi");
  CHECK(t.encode("<|eot_id|>", SpecialTokens::as_text).size() > 1);
  CHECK(t.decode(t.encode("<|eot_id|>", SpecialTokens::as_text)) == "<|eot_id|>");
  CHECK_THROWS_WITH_AS(
      t.encode("ok <|eot_id|>", SpecialTokens::refuse),
      "xtgrad::BpeTokenizer::encode: argument 'text' contains the special token "
      "'<|eot_id|>' at byte 3; pass SpecialTokens::allow to encode it as its id or "
      "SpecialTokens::as_text to encode it as text",
      std::invalid_argument);
  CHECK(t.encode("no special here", SpecialTokens::refuse) == t.encode("no special here"));
}

TEST_CASE(
    "bpe: decode replaces invalid UTF-8 as errors=replace does, and refuses ids outside the "
    "vocabulary") {
  const BpeTokenizer t = BpeTokenizer::from_pretrained(k_fixtures / "gpt2");
  for (const fx::DecodeCase& c : fx::decode_cases) {
    CAPTURE(c.text);
    CHECK(t.decode(std::vector<std::int64_t>(c.ids, c.ids + c.count)) == c.text);
  }
  const std::string n = std::to_string(fx::vocab_size);
  CHECK_THROWS_WITH_AS(t.decode({72, std::int64_t(fx::vocab_size)}),
                       ("xtgrad::BpeTokenizer::decode: argument 'ids' has id " + n +
                        " at position 1, outside the vocabulary of size " + n + " (ids 0 .. " +
                        std::to_string(fx::vocab_size - 1) + ")")
                           .c_str(),
                       std::invalid_argument);
  CHECK_THROWS_AS(t.decode({-1}), std::invalid_argument);
  CHECK_THROWS_WITH_AS(t.encode("ok\xff"),
                       "xtgrad::BpeTokenizer::encode: argument 'text' is not valid UTF-8 at byte 2",
                       std::invalid_argument);
  CHECK_THROWS_AS(t.encode("\xed\xa0\x80"), std::invalid_argument);  // a surrogate
  CHECK_THROWS_AS(t.encode("\xc0\xaf"), std::invalid_argument);      // overlong
}

TEST_CASE("bpe: the fortunes corpus equals encoder.py's ids and round-trips") {
  const std::vector<std::string> lines = fortunes_lines();
  std::string text;
  for (const std::string& line : lines) text += line;
  if (lines.empty() || fnv1a(text) != fx::corpus_hash) {
    MESSAGE(
        "skipped: /usr/share/games/fortunes (Debian package fortunes) is absent or not the "
        "text the fixture was made from");
    return;
  }
  CHECK(lines.size() == fx::corpus_lines);
  const std::pair<const char*, const fx::CorpusIds*> forms[] = {{"gpt2", &fx::corpus_gpt2},
                                                                {"llama3", &fx::corpus_llama3}};
  for (const auto& form : forms) {
    // not structured bindings: doctest's message macros capture them in lambdas (not C++17)
    const auto& dir = form.first;
    const auto& expected = form.second;
    CAPTURE(dir);
    const BpeTokenizer t = BpeTokenizer::from_pretrained(k_fixtures / dir);
    std::vector<std::vector<std::int64_t>> ids(lines.size());
    const auto start = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < lines.size(); ++i) ids[i] = t.encode(lines[i]);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    MESSAGE(std::string(dir) << ": encode " << text.size() / seconds / 1e6 << " MB/s ("
                             << text.size() << " bytes, one thread, the piece cache warming up)");
    IdHash hash;
    std::size_t count = 0;
    for (const auto& line : ids) {
      for (std::int64_t id : line) hash.add(static_cast<std::uint32_t>(id));
      hash.add(0xffffffffu);
      count += line.size();
    }
    CHECK(count == expected->count);
    CHECK(hash.h == expected->hash);
    for (const auto& [i, spot] : expected->spot_lines) CHECK(ids[i] == spot);
    std::size_t round_trips = 0;
    for (std::size_t i = 0; i < lines.size(); ++i) round_trips += t.decode(ids[i]) == lines[i];
    CHECK(round_trips == lines.size());
  }
}

TEST_CASE("bpe: encode from several threads at once gives the same ids") {
  const BpeTokenizer t = BpeTokenizer::from_pretrained(k_fixtures / "gpt2");
  std::vector<std::vector<std::int64_t>> got(4);
  std::vector<std::thread> threads;
  for (std::size_t k = 0; k < got.size(); ++k)
    threads.emplace_back([&, k] {
      for (const fx::EdgeCase& c : fx::edge_cases) {
        const auto ids = t.encode(text_of(c));
        got[k].insert(got[k].end(), ids.begin(), ids.end());
      }
    });
  for (auto& thread : threads) thread.join();
  std::vector<std::int64_t> expected;
  for (const fx::EdgeCase& c : fx::edge_cases)
    expected.insert(expected.end(), fx::ids + c.ids[0].begin, fx::ids + c.ids[0].end);
  for (const auto& ids : got) CHECK(ids == expected);
}

TEST_CASE("bpe: hostile or unsupported files are refused naming the file and the key") {
  TempDir dir("bpe");
  const nlohmann::json base =
      nlohmann::json::parse(xtgrad::testing::read_file(k_fixtures / "gpt2_json/tokenizer.json"));
  const nlohmann::json llama =
      nlohmann::json::parse(xtgrad::testing::read_file(k_fixtures / "llama3/tokenizer.json"));
  const fs::path path = dir / "tokenizer.json";
  const auto refused = [&](const nlohmann::json& j, const std::vector<std::string>& parts) {
    xtgrad::testing::write_file(path, j.dump());
    CHECK_THROWS_WITH_PARTS(BpeTokenizer::from_tokenizer_json(path), std::invalid_argument,
                            (parts));
  };
  const std::string file = "tokenizer.json'";
  nlohmann::json j = base;
  j["model"]["type"] = "Unigram";
  refused(j, {"from_tokenizer_json", file, "key 'model.type'", "Unigram", "expected \"BPE\""});
  j = base, j["normalizer"] = {{"type", "NFKC"}};
  refused(j, {file, "key 'normalizer'", "NFKC", "only null and NFC"});
  j = base, j["pre_tokenizer"] = {{"type", "Metaspace"}};
  refused(j, {file, "key 'pre_tokenizer'", "Metaspace"});
  j = base, j["pre_tokenizer"]["add_prefix_space"] = true;
  refused(j, {file, "key 'pre_tokenizer.add_prefix_space'"});
  j = llama, j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\p{L}+";
  refused(j, {file, "key 'pre_tokenizer.pretokenizers[0].pattern.Regex'", "\\p{L}+"});
  j = base, j["model"]["byte_fallback"] = true;
  refused(j, {file, "key 'model.byte_fallback'"});
  j = base, j["model"]["dropout"] = 0.1;
  refused(j, {file, "key 'model.dropout'"});
  j = base, j["decoder"] = {{"type", "Metaspace"}};
  refused(j, {file, "key 'decoder'", "Metaspace"});
  j = base, j["model"]["merges"][3] = "a";
  refused(j, {file, "key 'model.merges[3]'", "expected \"left right\""});
  j = base, j["model"]["merges"][5] = {"a", "QQ"};
  refused(j, {file, "key 'model.merges[5]'", "'QQ' is not in the vocabulary"});
  j = base, j["model"]["vocab"]["a"] = 1000000;
  refused(j, {file, "key 'model.vocab['a']'", "has id 1000000"});
  j = base, j["model"]["vocab"]["a"] = "7";
  refused(j, {file, "key 'model.vocab['a']'", "expected an integer token id"});
  j = base, j["model"]["vocab"]["a"] = 98;  // 'b' has 98
  refused(j, {file, "has id 98, which the token", "has already"});
  j = base, j["model"]["vocab"].erase("a"), j["model"]["vocab"]["QQQ"] = 97;
  refused(j, {file, "lacks the byte-level token 'a' of byte 97"});
  j = base, j["added_tokens"][0]["lstrip"] = true;
  refused(j, {file, "key 'added_tokens[0].lstrip'"});
  j = base, j["added_tokens"][0]["content"] = "\xc4\xa0t", j["added_tokens"][0]["id"] = 657;
  refused(j, {file, "key 'added_tokens[0]'", "'\\xc4\\xa0t' is already a token with id 256"});

  const auto text_refused = [&](const std::string& text, const std::vector<std::string>& parts) {
    xtgrad::testing::write_file(path, text);
    CHECK_THROWS_WITH_PARTS(BpeTokenizer::from_tokenizer_json(path), std::invalid_argument,
                            (parts));
  };
  text_refused("{\"model\": ", {file, "is not valid JSON"});
  text_refused(std::string(100, '[') + std::string(100, ']'), {file, "nested more than 64"});
  text_refused("{\"model\": {}, \"model\": {}}", {file, "has the key 'model' twice"});
  text_refused("[]", {file, "expected an object"});

  const fs::path vocab = dir / "vocab.json", merges = dir / "merges.txt";
  fs::copy_file(k_fixtures / "gpt2/vocab.json", vocab);
  xtgrad::testing::write_file(merges, "#version: 0.2\n\xc4\xa0 t\nthree parts here\n");
  CHECK_THROWS_WITH_PARTS(BpeTokenizer::from_gpt2_files(vocab, merges), std::invalid_argument,
                          {"from_gpt2_files", "merges.txt' line 3", "'three parts here'"});
  xtgrad::testing::write_file(merges, "\xc4\xa0 t\n");
  CHECK(BpeTokenizer::from_gpt2_files(vocab, merges).merges() == 1);  // no #version line
  CHECK_THROWS_WITH_PARTS(BpeTokenizer::from_pretrained(dir / "nothing"), std::invalid_argument,
                          {"from_pretrained", "neither tokenizer.json nor vocab.json"});
}
