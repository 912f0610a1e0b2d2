// GPT's two generates (gpt.hpp, gpt_generate.hpp): the single prompt and the
// batch of prompts of any lengths through one left-padded KvCache.
#include <algorithm>
#include <variant>

#include "../engine/checked_size.hpp"
#include "../engine/ops/linear.hpp"
#include "../engine/ops/slice.hpp"
#include "gpt.hpp"
#include "sampling.hpp"

namespace xtgrad {

namespace {

Indices as_indices(const std::vector<std::int64_t>& ids) {
  Indices out = xt::empty<std::int64_t>(std::vector<std::size_t>{ids.size()});
  std::copy(ids.begin(), ids.end(), out.begin());
  return out;
}

// Each sequence's last min(size, block_size) tokens, left-padded (with id 0)
// into [B, W], W the longest window; the cache emptied and each row's padding
// marked, so that the windows run from position 0 (kv_cache.hpp).
template <class T>
Indices windows(const std::vector<std::vector<std::int64_t>>& sequences, std::size_t block_size,
                KvCache<T>& cache) {
  std::size_t width = 0;
  for (const std::vector<std::int64_t>& s : sequences)
    width = std::max(width, std::min(s.size(), block_size));
  Indices ids = xt::zeros<std::int64_t>(std::vector<std::size_t>{sequences.size(), width});
  cache.clear();
  for (std::size_t b = 0; b < sequences.size(); ++b) {
    const std::size_t n = std::min(sequences[b].size(), block_size), pad = width - n;
    std::copy(sequences[b].end() - std::ptrdiff_t(n), sequences[b].end(), &ids(b, pad));
    cache.set_start(b, pad);
  }
  return ids;
}

}  // namespace

template <class T>
std::vector<std::int64_t> GPT<T>::generate(const std::vector<std::int64_t>& prompt,
                                           std::size_t max_new_tokens, double temperature,
                                           std::optional<std::size_t> top_k,
                                           std::uint64_t seed) const {
  const detail::Check check("GPT::generate");
  check.argument(!prompt.empty(), "prompt", "is empty, expected at least one token");
  const std::size_t length =
      detail::checked_add(check.function(), "the prompt's length and argument 'max_new_tokens'",
                          prompt.size(), max_new_tokens);
  check.argument(length <= config_.block_size, "max_new_tokens", "is ", max_new_tokens,
                 ": with the ", prompt.size(), " prompt tokens that exceeds block_size ",
                 config_.block_size);
  check_sampling(check, temperature, top_k);
  Indices ids = xt::empty<std::int64_t>(std::vector<std::size_t>{1, prompt.size()});
  std::copy(prompt.begin(), prompt.end(), ids.begin());
  detail::check_indices(check.function(), "prompt", ids, config_.vocab_size);

  std::vector<std::int64_t> out = prompt;
  if (max_new_tokens == 0) return out;
  const detail::InferenceScope inference;
  GPT<T>& self = const_cast<GPT<T>&>(*this);  // only read with recording off
  Tape<T> tape;
  tape.set_grad_enabled(false);
  KvCache<T> cache = make_cache(1);
  Generator rng(seed);
  const std::size_t v = config_.vocab_size;
  Var<T> logits = self.run(tape, ids, &cache);  // [1, P, V]
  std::size_t row = prompt.size() - 1;
  for (std::size_t n = 0; n < max_new_tokens; ++n) {
    const T* last = logits.value().data() + row * v;
    const std::int64_t next =
        sample_token(std::vector<double>(last, last + v), temperature, top_k, rng);
    out.push_back(next);
    if (n + 1 == max_new_tokens) break;
    tape.clear();
    Indices step = xt::empty<std::int64_t>(std::vector<std::size_t>{1, 1});
    step(0, 0) = next;
    logits = self.run(tape, step, &cache);
    row = 0;
  }
  return out;
}

template <class T>
xt::xarray<T> GPT<T>::last_logits(Tape<T>& tape, const Indices& tokens, KvCache<T>& cache) {
  const std::size_t batch = tokens.shape()[0];
  const auto t = std::int64_t(tokens.shape()[1]);
  Var<T> x = run_blocks(tape, embed(tape, tokens, &cache), &cache, nullptr);  // [B, T, C]
  x = slice(x, 1, t - 1, t);                                                  // [B, 1, C]
  x = std::visit([&](auto& n) { return n.forward(x); }, ln_f);
  const Var<T> logits = lm_head ? lm_head->forward(x)
                                : linear(x, tape.param(wte.weight), std::nullopt,
                                         WeightLayout::out_in);  // [B, 1, V]
  xt::xarray<T> out = std::move(tape.value_mut(logits.index()));
  out.reshape({batch, config_.vocab_size});
  return out;
}

template <class T>
std::vector<std::vector<std::int64_t>> GPT<T>::generate(
    const std::vector<std::vector<std::int64_t>>& prompts, const GenerationOptions& options) const {
  const detail::Check check("GPT::generate");
  check.argument(!prompts.empty(), "prompts", "is empty, expected at least one prompt");
  for (std::size_t b = 0; b < prompts.size(); ++b) {
    check.argument(!prompts[b].empty(), "prompts", "holds an empty prompt at index ", b,
                   ", expected at least one token in each");
    detail::check_indices(check.function(), "prompts", as_indices(prompts[b]), config_.vocab_size);
  }
  check_sampling(check, options.temperature, options.top_k);
  check_top_p(check, options.top_p);
  detail::check_indices(check.function(), "stop_tokens", as_indices(options.stop_tokens),
                        config_.vocab_size);

  std::vector<std::vector<std::int64_t>> out = prompts;
  if (options.max_new_tokens == 0) return out;
  const detail::InferenceScope inference;
  GPT<T>& self = const_cast<GPT<T>&>(*this);  // only read with recording off
  Tape<T> tape;
  tape.set_grad_enabled(false);
  const std::size_t rows = prompts.size(), v = config_.vocab_size;
  KvCache<T> cache = make_cache(rows);
  std::vector<Generator> rng;
  for (std::size_t b = 0; b < rows; ++b) rng.emplace_back(options.seed + b * k_row_seed_step);
  const auto& stops = options.stop_tokens;
  // live[i]: the prompt of the batch's row i. A row that stops leaves the
  // batch (KvCache::keep_rows), so that the others run as a smaller one.
  std::vector<std::size_t> live(rows);
  for (std::size_t b = 0; b < rows; ++b) live[b] = b;
  const auto live_sequences = [&] {
    std::vector<std::vector<std::int64_t>> sequences;
    for (const std::size_t b : live) sequences.push_back(out[b]);
    return sequences;
  };
  xt::xarray<T> logits = self.last_logits(tape, windows(out, config_.block_size, cache), cache);
  for (std::size_t n = 0; n < options.max_new_tokens; ++n) {
    std::vector<std::size_t> kept;  // the batch's rows that go on
    for (std::size_t i = 0; i < live.size(); ++i) {
      const std::size_t b = live[i];
      const T* row = logits.data() + i * v;
      const std::int64_t next = sample_token(std::vector<double>(row, row + v), options.temperature,
                                             options.top_k, options.top_p, rng[b]);
      out[b].push_back(next);
      if (std::find(stops.begin(), stops.end(), next) == stops.end()) kept.push_back(i);
    }
    if (kept.empty() || n + 1 == options.max_new_tokens) break;
    tape.clear();
    if (kept.size() < live.size()) {
      cache.keep_rows(kept);
      for (std::size_t i = 0; i < kept.size(); ++i) live[i] = live[kept[i]];
      live.resize(kept.size());
    }
    if (cache.length(0) == config_.block_size) {  // the window slides: encode it afresh
      logits = self.last_logits(tape, windows(live_sequences(), config_.block_size, cache), cache);
      continue;
    }
    Indices step = xt::empty<std::int64_t>(std::vector<std::size_t>{live.size(), 1});
    for (std::size_t i = 0; i < live.size(); ++i) step(i, 0) = out[live[i]].back();
    logits = self.last_logits(tape, step, cache);
  }
  return out;
}

#define XTGRAD_GPT_GENERATE(T)                                                           \
  template std::vector<std::int64_t> GPT<T>::generate(                                   \
      const std::vector<std::int64_t>&, std::size_t, double, std::optional<std::size_t>, \
      std::uint64_t) const;                                                              \
  template std::vector<std::vector<std::int64_t>> GPT<T>::generate(                      \
      const std::vector<std::vector<std::int64_t>>&, const GenerationOptions&) const;    \
  template xt::xarray<T> GPT<T>::last_logits(Tape<T>&, const Indices&, KvCache<T>&);
XTGRAD_GPT_GENERATE(float)
XTGRAD_GPT_GENERATE(double)
#undef XTGRAD_GPT_GENERATE

}  // namespace xtgrad
