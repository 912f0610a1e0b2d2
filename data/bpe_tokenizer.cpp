// BpeTokenizer: the checks that build a model, encode (added tokens, pieces,
// merges by rank) and decode.

#include "bpe_tokenizer.hpp"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>

#include "../engine/errors.hpp"
#include "bpe_model.hpp"
#include "unicode_classes.hpp"

namespace xtgrad {

namespace detail {

namespace {

constexpr std::size_t k_cache_pieces = std::size_t(1) << 16;  // emptied when full
constexpr std::size_t k_cached_piece_bytes = 256;             // longer pieces are not cached

std::uint64_t pair_key(std::int32_t left, std::int32_t right) {
  return static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32 |
         static_cast<std::uint32_t>(right);
}

// The bytes a vocabulary token stands for: its characters through the
// byte-level table, or, when one of them is not a byte-level character, its
// own UTF-8 (as Hugging Face's ByteLevel decoder does).
std::string token_bytes_of(const std::string& token) {
  std::string out;
  for (std::size_t at = 0; at < token.size();) {
    const std::int32_t c = next_code_point(token, at);
    const int b = c < 0 ? -1 : unicode_to_byte(static_cast<char32_t>(c));
    if (b < 0) return token;
    out += static_cast<char>(b);
  }
  return out;
}

// Ids: unique, and together (vocabulary and added tokens) 0 .. N-1, so that
// no id is a hole and no file makes us allocate more than it holds. Fills
// model.ids and model.added; returns each id's token text.
std::vector<const std::string*> place_ids(const BpeSource& source, BpeTokenizer::Model& model) {
  const std::string& function = source.function;
  const std::size_t bound = source.vocab.size() + source.added.size();
  std::vector<const std::string*> text_of(bound, nullptr);
  const auto place = [&](const std::string& token, std::int64_t id, const std::string& where) {
    if (token.empty()) fail_value(function, where + " is an empty token");
    if (id < 0 || static_cast<std::size_t>(id) >= bound)
      fail_value(function, where + " has id " + std::to_string(id) +
                               ", expected ids 0 .. N-1 for the N tokens (N <= " +
                               std::to_string(bound) + ")");
    const std::string*& slot = text_of[static_cast<std::size_t>(id)];
    if (slot != nullptr && *slot != token)
      fail_value(function, where + " has id " + std::to_string(id) + ", which the token '" +
                               escaped(*slot, 64) + "' has already");
    const bool repeated = slot != nullptr;
    slot = &token;
    return repeated;
  };
  model.ids.reserve(bound);
  for (const BpeSource::Entry& e : source.vocab) {
    place(e.token, e.id, e.where);
    if (!model.ids.emplace(e.token, static_cast<std::int32_t>(e.id)).second)
      fail_value(function, e.where + " is a token twice");
  }
  for (const BpeSource::Added& a : source.added) {
    const bool in_vocab = place(a.token.content, a.token.id, a.where);
    const auto [it, inserted] =
        model.ids.emplace(a.token.content, static_cast<std::int32_t>(a.token.id));
    if (!inserted && (!in_vocab || it->second != a.token.id))
      fail_value(function, a.where + " '" + escaped(a.token.content, 64) +
                               "' is already a token with id " + std::to_string(it->second));
    model.added.push_back(a.token);
  }
  std::size_t n = 0;
  while (n < bound && text_of[n] != nullptr) ++n;
  for (std::size_t id = n; id < bound; ++id)
    if (text_of[id] != nullptr)
      fail_value(function, source.vocab_where + " has no token with id " + std::to_string(n) +
                               " but has id " + std::to_string(id) +
                               ": the ids must be 0 .. N-1 for the N tokens");
  text_of.resize(n);
  return text_of;
}

// Each id's text, the bytes it decodes to and whether it is special.
void set_tokens(const std::vector<const std::string*>& text_of, BpeTokenizer::Model& model) {
  const std::size_t n = text_of.size();
  model.tokens.resize(n);
  model.token_bytes.resize(n);
  model.special.assign(n, 0);
  for (std::size_t id = 0; id < n; ++id) {
    model.tokens[id] = *text_of[id];
    model.token_bytes[id] = token_bytes_of(model.tokens[id]);
  }
  for (const AddedToken& a : model.added) {
    const auto id = static_cast<std::size_t>(a.id);
    model.token_bytes[id] = a.content;  // added tokens decode to their text
    if (a.special) model.special[id] = 1;
  }
}

void set_byte_ids(const BpeSource& source, BpeTokenizer::Model& model) {
  for (int b = 0; b < 256; ++b) {
    const std::string& c = byte_to_unicode(static_cast<unsigned char>(b));
    const auto it = model.ids.find(c);
    if (it == model.ids.end())
      fail_value(source.function, source.vocab_where + " lacks the byte-level token '" + c +
                                      "' of byte " + std::to_string(b) +
                                      " (a byte-level BPE vocabulary has all 256)");
    model.byte_ids[b] = it->second;
  }
}

// Merges: rank = line order; a pair listed twice keeps its last rank, as
// encoder.py's dict(zip(merges, range(len(merges)))) does.
void set_merges(const BpeSource& source, BpeTokenizer::Model& model) {
  model.merges.reserve(source.merges.size());
  model.merge_rules = source.merges.size();
  for (std::size_t rank = 0; rank < source.merges.size(); ++rank) {
    const BpeSource::MergeRule& m = source.merges[rank];
    const auto find = [&](const std::string& token) {
      const auto it = model.ids.find(token);
      if (it == model.ids.end())
        fail_value(source.function, m.where + " merges '" + escaped(m.left, 64) + "' and '" +
                                        escaped(m.right, 64) + "', but '" + escaped(token, 64) +
                                        "' is not in the vocabulary");
      return it->second;
    };
    const std::int32_t left = find(m.left), right = find(m.right), merged = find(m.left + m.right);
    model.merges[pair_key(left, right)] = {static_cast<std::int32_t>(rank), merged};
  }
}

// The added tokens by first byte, longest first: encode's search order.
void index_added(BpeTokenizer::Model& model) {
  model.added_by_first_byte.resize(256);
  for (std::size_t i = 0; i < model.added.size(); ++i)
    model.added_by_first_byte[static_cast<unsigned char>(model.added[i].content[0])].push_back(i);
  for (auto& list : model.added_by_first_byte)
    std::stable_sort(list.begin(), list.end(), [&](std::size_t a, std::size_t b) {
      return model.added[a].content.size() > model.added[b].content.size();
    });
}

}  // namespace

std::shared_ptr<BpeTokenizer::Model> build_bpe_model(BpeSource source) {
  auto model = std::make_shared<BpeTokenizer::Model>();
  model->pattern = source.pattern;
  model->ignore_merges = source.ignore_merges;
  model->nfc = source.nfc;
  set_tokens(place_ids(source, *model), *model);
  set_byte_ids(source, *model);
  set_merges(source, *model);
  index_added(*model);
  return model;
}

namespace {

// With ignore_merges (LLaMA-3's tokenizer.json), a piece that is a
// vocabulary token as a whole is that token: appends it and returns true.
bool whole_piece_token(const BpeTokenizer::Model& model, std::string_view piece,
                       std::vector<std::int64_t>& out) {
  std::string token;
  for (char c : piece) token += byte_to_unicode(static_cast<unsigned char>(c));
  const auto it = model.ids.find(token);
  if (it == model.ids.end()) return false;
  out.push_back(it->second);
  return true;
}

// encoder.py's bpe() on one piece: while some adjacent pair has a rank, take
// the lowest and merge it at each of its leftmost non-overlapping places.
// With a heap of (rank, position) the work is O(n log n) for a piece of n
// bytes; pairs a pass creates wait until the pass is over, as encoder.py
// only looks for the next pair after rebuilding the word. The symbols are a
// linked list over the piece's bytes; the buffers are kept per thread, so a
// warm encode allocates none.
class PieceMerger {
 public:
  void run(const BpeTokenizer::Model& model, std::string_view piece,
           std::vector<std::int64_t>& out) {
    start(model, piece);
    while (!heap_.empty()) merge_lowest_rank(model);
    for (std::int32_t i = 0; i >= 0; i = next_[at(i)]) out.push_back(id_[at(i)]);
  }

 private:
  struct Candidate {
    std::int32_t rank, position, left, right;  // the pair (left, right) at position
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : position > o.position;
    }
  };
  static std::size_t at(std::int32_t i) { return static_cast<std::size_t>(i); }

  void start(const BpeTokenizer::Model& model, std::string_view piece) {
    const std::size_t n = piece.size();
    id_.resize(n), next_.resize(n), prev_.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      id_[i] = model.byte_ids[static_cast<unsigned char>(piece[i])];
      next_[i] = i + 1 < n ? static_cast<std::int32_t>(i + 1) : -1;
      prev_[i] = static_cast<std::int32_t>(i) - 1;  // -2 marks a symbol merged away
    }
    heap_.clear(), created_.clear();
    for (std::size_t i = 0; i + 1 < n; ++i) consider(model, static_cast<std::int32_t>(i), heap_);
    std::make_heap(heap_.begin(), heap_.end(), later_);
  }

  // The pair starting at `position`, if it has a rank, goes into `into`.
  void consider(const BpeTokenizer::Model& model, std::int32_t position,
                std::vector<Candidate>& into) const {
    const std::int32_t right = next_[at(position)];
    if (right < 0) return;
    const std::int32_t a = id_[at(position)], b = id_[at(right)];
    const auto it = model.merges.find(pair_key(a, b));
    if (it != model.merges.end()) into.push_back({it->second.rank, position, a, b});
  }

  // Merges every place of the lowest rank left, left to right.
  void merge_lowest_rank(const BpeTokenizer::Model& model) {
    const std::int32_t rank = heap_.front().rank;
    while (!heap_.empty() && heap_.front().rank == rank) {
      std::pop_heap(heap_.begin(), heap_.end(), later_);
      const Candidate c = heap_.back();
      heap_.pop_back();
      const std::size_t p = at(c.position);
      const std::int32_t r = next_[p];
      if (prev_[p] == -2 || r < 0 || id_[p] != c.left || id_[at(r)] != c.right)
        continue;  // a stale entry: the pair is no longer there
      id_[p] = model.merges.find(pair_key(c.left, c.right))->second.merged;
      prev_[at(r)] = -2;
      next_[p] = next_[at(r)];
      if (next_[p] >= 0) prev_[at(next_[p])] = c.position;
      if (prev_[p] >= 0) consider(model, prev_[p], created_);
      consider(model, c.position, created_);
    }
    for (const Candidate& c : created_) {
      heap_.push_back(c);
      std::push_heap(heap_.begin(), heap_.end(), later_);
    }
    created_.clear();
  }

  std::vector<std::int32_t> id_, next_, prev_;
  std::vector<Candidate> heap_, created_;  // heap_: a min-heap on (rank, position)
  std::greater<Candidate> later_;
};

void merge_piece(const BpeTokenizer::Model& model, std::string_view piece,
                 std::vector<std::int64_t>& out) {
  if (model.ignore_merges && piece.size() > 1 && whole_piece_token(model, piece, out)) return;
  thread_local PieceMerger merger;
  merger.run(model, piece, out);
}

void encode_piece(const BpeTokenizer::Model& model, std::string_view piece,
                  std::vector<std::int64_t>& out) {
  if (piece.size() == 1) {
    out.push_back(model.byte_ids[static_cast<unsigned char>(piece[0])]);
    return;
  }
  const bool cached = piece.size() <= k_cached_piece_bytes;
  if (cached) {
    const std::lock_guard<std::mutex> lock(model.cache_mutex);
    const auto it = model.cache.find(std::string(piece));
    if (it != model.cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const std::size_t first = out.size();
  merge_piece(model, piece, out);
  if (cached) {
    const std::lock_guard<std::mutex> lock(model.cache_mutex);
    if (model.cache.size() >= k_cache_pieces) model.cache.clear();
    model.cache.emplace(
        std::string(piece),
        std::vector<std::int32_t>(out.begin() + static_cast<std::ptrdiff_t>(first), out.end()));
  }
}

// The leftmost, then longest, added token in text[from, ...) that `usable`
// accepts: its index and position, or {npos, npos}.
template <class Usable>
std::pair<std::size_t, std::size_t> find_added(const BpeTokenizer::Model& model,
                                               std::string_view text, std::size_t from,
                                               const Usable& usable) {
  if (model.added.empty()) return {std::string_view::npos, std::string_view::npos};
  for (std::size_t at = from; at < text.size(); ++at) {
    for (std::size_t i : model.added_by_first_byte[static_cast<unsigned char>(text[at])]) {
      const std::string& content = model.added[i].content;
      if (usable(model.added[i]) && text.compare(at, content.size(), content) == 0) return {i, at};
    }
  }
  return {std::string_view::npos, std::string_view::npos};
}

}  // namespace

}  // namespace detail

BpeTokenizer::BpeTokenizer(std::shared_ptr<Model> model) : model_(std::move(model)) {}
BpeTokenizer::~BpeTokenizer() = default;

std::vector<std::int64_t> BpeTokenizer::encode(std::string_view text, SpecialTokens special) const {
  const detail::Check check("BpeTokenizer::encode");
  const Model& model = *model_;
  // UTF-8, and for an NFC normalizer UAX #15's quick check: text is NFC when
  // no character has NFC_Quick_Check No or Maybe and the nonzero combining
  // classes never decrease. Such text NFC leaves as it is, so the normalizer
  // is the identity; other text is refused rather than tokenized unnormalized.
  unsigned char last_combining = 0;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t start = at;
    const std::int32_t c = detail::next_code_point(text, at);
    check.argument(c >= 0, "text", "is not valid UTF-8 at byte ", start);
    if (!model.nfc || c < 0x80) {
      last_combining = 0;
      continue;
    }
    const auto cp = static_cast<char32_t>(c);
    const unsigned char combining = detail::canonical_combining_class(cp);
    const bool stable = !(detail::unicode_class(cp) & detail::k_nfc_not_yes) &&
                        (combining == 0 || last_combining <= combining);
    if (!stable) {
      char code[16];
      std::snprintf(code, sizeof code, "U+%04X", static_cast<unsigned>(c));
      check.argument(false, "text", "has ", code, " at byte ", start,
                     ", where NFC normalization (this tokenizer's normalizer) may change the "
                     "text; only text NFC leaves as it is is implemented: normalize it to NFC "
                     "first");
    }
    last_combining = combining;
  }
  if (special == SpecialTokens::refuse) {
    const auto [i, at] =
        detail::find_added(model, text, 0, [](const AddedToken& a) { return a.special; });
    check.argument(
        i == std::string_view::npos, "text", "contains the special token '",
        i == std::string_view::npos ? std::string() : detail::escaped(model.added[i].content, 64),
        "' at byte ", at,
        "; pass SpecialTokens::allow to encode it as its id or "
        "SpecialTokens::as_text to encode it as text");
  }
  const auto usable = [special](const AddedToken& a) {
    return !a.special || special == SpecialTokens::allow;
  };
  std::vector<std::int64_t> ids;
  ids.reserve(text.size() / 3 + 1);
  thread_local std::vector<std::pair<std::size_t, std::size_t>> pieces;
  const auto encode_text = [&](std::string_view part) {
    pieces.clear();
    detail::split_pieces(model.pattern, part, pieces);
    for (const auto& [begin, end] : pieces)
      detail::encode_piece(model, part.substr(begin, end - begin), ids);
  };
  std::size_t from = 0;
  while (from < text.size()) {
    const auto [i, at] = detail::find_added(model, text, from, usable);
    if (i == std::string_view::npos) {
      encode_text(text.substr(from));
      break;
    }
    encode_text(text.substr(from, at - from));
    ids.push_back(model.added[i].id);
    from = at + model.added[i].content.size();
  }
  return ids;
}

std::string BpeTokenizer::decode(const std::vector<std::int64_t>& ids,
                                 bool skip_special_tokens) const {
  const detail::Check check("BpeTokenizer::decode");
  const Model& model = *model_;
  const std::size_t n = model.tokens.size();
  std::string bytes;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::int64_t id = ids[i];
    check.argument(id >= 0 && static_cast<std::size_t>(id) < n, "ids", "has id ", id,
                   " at position ", i, ", outside the vocabulary of size ", n, " (ids 0 .. ", n - 1,
                   ")");
    if (skip_special_tokens && model.special[static_cast<std::size_t>(id)]) continue;
    bytes += model.token_bytes[static_cast<std::size_t>(id)];
  }
  return detail::utf8_replace_invalid(bytes);
}

std::vector<std::string> BpeTokenizer::pre_tokenize(std::string_view text) const {
  const detail::Check check("BpeTokenizer::pre_tokenize");
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t start = at;
    check.argument(detail::next_code_point(text, at) >= 0, "text", "is not valid UTF-8 at byte ",
                   start);
  }
  std::vector<std::pair<std::size_t, std::size_t>> pieces;
  detail::split_pieces(model_->pattern, text, pieces);
  std::vector<std::string> out;
  for (const auto& [begin, end] : pieces) out.emplace_back(text.substr(begin, end - begin));
  return out;
}

std::size_t BpeTokenizer::vocab_size() const {
  return model_->tokens.size();
}

std::optional<std::int64_t> BpeTokenizer::token_to_id(std::string_view token) const {
  const auto it = model_->ids.find(std::string(token));
  if (it == model_->ids.end()) return std::nullopt;
  return it->second;
}

const std::string& BpeTokenizer::id_to_token(std::int64_t id) const {
  const std::size_t n = model_->tokens.size();
  detail::Check("BpeTokenizer::id_to_token")
      .argument(id >= 0 && static_cast<std::size_t>(id) < n, "id", "is ", id,
                ", outside the vocabulary of size ", n);
  return model_->tokens[static_cast<std::size_t>(id)];
}

PreTokenizer BpeTokenizer::pre_tokenizer() const {
  return model_->pattern;
}

const std::vector<AddedToken>& BpeTokenizer::added_tokens() const {
  return model_->added;
}

std::size_t BpeTokenizer::merges() const {
  return model_->merge_rules;
}

}  // namespace xtgrad
