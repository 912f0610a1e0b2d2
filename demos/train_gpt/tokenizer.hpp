#pragma once
// The character vocabulary of train_gpt: every distinct code point of the
// corpus (both splits, so that every validation character has an id), in
// increasing order; token id = its rank. The vocabulary is saved with the
// checkpoint (run_state.cpp) so that --generate encodes and decodes as the
// training run did.
//
// The unigram baseline: the cross-entropy, in nats, of the training text's
// character frequencies on the validation text,
//   H = -(1/N) sum_n log p(c_n),   p(c) = (count_train(c) + 1) / (N_train + V)
// (add-one smoothing, so that a character seen only in validation has a
// finite cost), over the same N characters the model is scored on (every
// validation character but the first, which no window predicts). A model
// that learned nothing about context scores at best about this.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <xtgrad/engine/indices.hpp>

namespace gpt_demo {

class Vocabulary {
 public:
  Vocabulary() = default;
  // The distinct code points of `texts`.
  static Vocabulary of(const std::vector<const std::u32string*>& texts);
  // From the saved list of code points (strictly increasing, each a valid
  // code point); std::invalid_argument otherwise.
  static Vocabulary from_code_points(std::vector<char32_t> code_points);

  std::size_t size() const { return code_points_.size(); }
  const std::vector<char32_t>& code_points() const { return code_points_; }

  // Token ids of `text`; std::invalid_argument naming `what` and the first
  // character outside the vocabulary.
  std::vector<std::int64_t> encode(const std::u32string& text, const std::string& what) const;
  // As encode, into a flat Indices.
  xtgrad::Indices encode_indices(const std::u32string& text, const std::string& what) const;
  // The text of ids in [0, size()); std::invalid_argument otherwise.
  std::u32string decode(const std::vector<std::int64_t>& ids) const;

 private:
  std::vector<char32_t> code_points_;  // sorted
};

// H above, of `train` (counts) on `validation` (targets), both already ids.
double unigram_cross_entropy(const xtgrad::Indices& train, const xtgrad::Indices& validation,
                             std::size_t vocab_size);

}  // namespace gpt_demo
