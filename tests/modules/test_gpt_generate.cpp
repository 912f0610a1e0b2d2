// GPT::generate over a batch of prompts (gpt_generate.hpp): against the
// single-prompt generate row by row (gpt2 and llama styles, greedy and
// sampled, prompts of different lengths), stop tokens (rows leaving the
// batch, KvCache::keep_rows), the sliding window
// past block_size against the full forward by hand, top-p, seeds, the
// LlamaForCausalLM wrapper, and the bad-input rows.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xview.hpp>
#include <xtgrad/modules/gpt.hpp>
#include <xtgrad/modules/pretrained/hf_llama.hpp>
#include <xtgrad/modules/sampling.hpp>

#include "support/bad_input.hpp"
#include "support/test_helpers.hpp"
#include "support/tiny_llama.hpp"

using namespace xtgrad;
using namespace xtgrad::testing;

namespace {

using Ids = std::vector<std::int64_t>;

GPTConfig tiny(GPTStyle style) {
  GPTConfig c;
  c.vocab_size = 13;
  c.block_size = 10;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 8;
  c.style = style;
  if (style == GPTStyle::llama) {
    c.n_kv_head = 2;
    c.ffn_hidden = 12;
  }
  return c;
}

// Parameters spread out (the 0.02 initialization makes near-uniform logits).
template <class T>
GPT<T> spread_model(GPTStyle style) {
  GPT<T> model(tiny(style));
  std::uint32_t seed = 5;
  for (auto* p : model.parameters())
    p->value = xt::cast<T>(
        random_array(std::vector<std::size_t>(p->value.shape().begin(), p->value.shape().end()),
                     seed++, -0.6, 0.6));
  return model;
}

GenerationOptions options(std::size_t n, double temperature, std::uint64_t seed = 0) {
  GenerationOptions o;
  o.max_new_tokens = n;
  o.temperature = temperature;
  o.seed = seed;
  return o;
}

const std::vector<Ids> k_prompts = {{3, 1, 4, 1, 5}, {9}, {2, 6, 5}, {8, 9, 7, 9}};

// The greedy continuation by hand: each token the argmax of the full forward
// of the last block_size tokens before it.
template <class T>
Ids greedy_by_hand(const GPT<T>& model, Ids ids, std::size_t n) {
  const std::size_t block = model.gpt_config().block_size;
  for (std::size_t k = 0; k < n; ++k) {
    const std::size_t w = std::min(ids.size(), block);
    Indices window = xt::empty<std::int64_t>(std::vector<std::size_t>{w});
    std::copy(ids.end() - std::ptrdiff_t(w), ids.end(), window.begin());
    const xt::xarray<T> logits = model.infer(window);  // [w, V]
    const auto last = xt::view(logits, w - 1, xt::all());
    ids.push_back(std::int64_t(std::max_element(last.begin(), last.end()) - last.begin()));
  }
  return ids;
}

}  // namespace

TEST_CASE_TEMPLATE("GPT::generate (batch): a batch of one is the single generate", T, float,
                   double) {
  for (const GPTStyle style : {GPTStyle::gpt2, GPTStyle::llama}) {
    INFO("style " << style_name(style));
    const GPT<T> model = spread_model<T>(style);
    for (const Ids& prompt : k_prompts) {
      CHECK(model.generate({prompt}, options(4, 0.0)).at(0) == model.generate(prompt, 4, 0.0));
      GenerationOptions sampled = options(5, 1.3, 17);
      sampled.top_k = 6;
      CHECK(model.generate({prompt}, sampled).at(0) ==
            model.generate(prompt, 5, 1.3, std::size_t(6), 17));
    }
  }
}

TEST_CASE("GPT::generate (batch): each row is its prompt generated alone") {
  for (const GPTStyle style : {GPTStyle::gpt2, GPTStyle::llama}) {
    INFO("style " << style_name(style));
    const GPT<double> model = spread_model<double>(style);
    const std::vector<Ids> greedy = model.generate(k_prompts, options(5, 0.0));
    const std::vector<Ids> sampled = model.generate(k_prompts, options(5, 0.9, 3));
    REQUIRE(greedy.size() == k_prompts.size());
    for (std::size_t b = 0; b < k_prompts.size(); ++b) {
      INFO("row " << b);
      CHECK(greedy[b] == model.generate(k_prompts[b], 5, 0.0));
      CHECK(greedy[b] == greedy_by_hand(model, k_prompts[b], 5));
      CHECK(sampled[b] ==
            model.generate(k_prompts[b], 5, 0.9, std::nullopt, 3 + b * k_row_seed_step));
    }
    CHECK(model.generate(k_prompts, options(5, 0.9, 3)) == sampled);  // same seed, same text
  }
}

TEST_CASE("GPT::generate (batch): a row that draws a stop token stops, the others go on") {
  const GPT<double> model = spread_model<double>(GPTStyle::gpt2);
  const std::vector<Ids> free = model.generate(k_prompts, options(6, 0.0));
  GenerationOptions o = options(6, 0.0);
  o.stop_tokens = {free[0][k_prompts[0].size() + 1]};  // row 0's second new token
  const std::vector<Ids> stopped = model.generate(k_prompts, o);
  const std::size_t end0 =
      std::size_t(std::find(free[0].begin() + std::ptrdiff_t(k_prompts[0].size()), free[0].end(),
                            o.stop_tokens[0]) -
                  free[0].begin());
  CHECK(stopped[0] == Ids(free[0].begin(), free[0].begin() + std::ptrdiff_t(end0 + 1)));
  for (std::size_t b = 1; b < k_prompts.size(); ++b) {
    INFO("row " << b);
    const auto begin = free[b].begin() + std::ptrdiff_t(k_prompts[b].size());
    const auto hit = std::find(begin, free[b].end(), o.stop_tokens[0]);
    const Ids expected(free[b].begin(), hit == free[b].end() ? hit : hit + 1);
    CHECK(stopped[b] == expected);
  }
  CHECK(model.generate(k_prompts, options(0, 0.0)) == k_prompts);
}

TEST_CASE("GPT::generate (batch): rows leave the batch as they stop, each as generated alone") {
  const GPT<double> model = spread_model<double>(GPTStyle::llama);
  GenerationOptions o = options(8, 1.1, 7);
  o.top_k = 5;
  o.stop_tokens = {2, 5};
  const std::vector<Ids> out = model.generate(k_prompts, o);
  std::vector<std::size_t> lengths;
  for (std::size_t b = 0; b < k_prompts.size(); ++b) {
    INFO("row " << b);
    GenerationOptions alone = o;
    alone.seed = o.seed + b * k_row_seed_step;
    CHECK(out[b] == model.generate({k_prompts[b]}, alone).at(0));
    lengths.push_back(out[b].size() - k_prompts[b].size());
  }
  // rows stopped at different steps, one ran to the end
  CHECK(*std::min_element(lengths.begin(), lengths.end()) < 8);
  CHECK(*std::max_element(lengths.begin(), lengths.end()) == 8);
}

TEST_CASE("KvCache::keep_rows: the kept rows move down with their keys, values and starts") {
  KvCache<double> cache(3, 2, 1, 2, 4);
  cache.set_start(2, 1);
  const xt::xarray<double> k = xt::arange<double>(12).reshape({3, 1, 2, 2}), v = k + 100.0;
  for (std::size_t layer = 0; layer < 2; ++layer) cache.append(layer, k, v);
  std::vector<Row> rows;
  auto bad = row_adder(rows);
  bad("keep_rows: none", [&] { cache.keep_rows({}); }, Expect::invalid_argument,
      {"KvCache::keep_rows", "'rows'", "is empty"});
  bad("keep_rows: not increasing",
      [&] {
        cache.keep_rows({1, 1});
      },
      Expect::invalid_argument, {"KvCache::keep_rows", "'rows'", "holds 1 at index 1", "batch 3"});
  bad("keep_rows: past the batch",
      [&] {
        cache.keep_rows({0, 3});
      },
      Expect::invalid_argument, {"KvCache::keep_rows", "'rows'", "holds 3 at index 1"});
  report("KvCache::keep_rows", run_rows(rows, [&] {
           State s;
           s.add(cache.batch());
           s.add(cache.start(2));
           return s;
         }));
  cache.keep_rows({0, 2});
  REQUIRE(cache.batch() == 2);
  CHECK(cache.start(0) == 0);
  CHECK(cache.start(1) == 1);
  const auto kept = [](const xt::xarray<double>& a) {
    return xt::xarray<double>(xt::view(a, xt::keep(0, 2), xt::all(), xt::all(), xt::all()));
  };
  CHECK(cache.keys(1) == kept(k));
  CHECK(cache.values(0) == kept(v));
}

TEST_CASE("GPT::generate (batch): past block_size the window slides") {
  for (const GPTStyle style : {GPTStyle::gpt2, GPTStyle::llama}) {
    INFO("style " << style_name(style));
    const GPT<double> model = spread_model<double>(style);
    const std::vector<Ids> prompts = {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {4, 4}};
    const std::vector<Ids> out = model.generate(prompts, options(12, 0.0));
    for (std::size_t b = 0; b < prompts.size(); ++b) {
      INFO("row " << b);
      CHECK(out[b] == greedy_by_hand(model, prompts[b], 12));
    }
  }
}

TEST_CASE("sample_token: top_p keeps the fewest most probable tokens reaching p") {
  // probabilities 0.5, 0.3, 0.2 (and 0 for the fourth)
  const std::vector<double> logits = {std::log(0.5), std::log(0.3), std::log(0.2), -INFINITY};
  std::vector<int> seen(4, 0);
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    Generator rng(seed);
    ++seen[std::size_t(sample_token(logits, 1.0, std::nullopt, 0.75, rng))];
  }
  CHECK(seen[0] > 0);
  CHECK(seen[1] > 0);
  CHECK(seen[2] == 0);  // 0.5 + 0.3 >= 0.75: the 0.2 token is cut
  CHECK(seen[3] == 0);
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    Generator a(seed), b(seed), c(seed);
    CHECK(sample_token(logits, 1.0, std::nullopt, 0.4, a) == 0);  // the argmax alone
    CHECK(sample_token(logits, 1.0, std::nullopt, 1.0, b) ==
          sample_token(logits, 1.0, std::nullopt, c));
  }
  const GPT<double> model = spread_model<double>(GPTStyle::llama);
  GenerationOptions nucleus = options(5, 1.0, 9);
  nucleus.top_p = 1e-9;  // only the most probable token: greedy
  CHECK(model.generate(k_prompts, nucleus) == model.generate(k_prompts, options(5, 0.0)));
}

TEST_CASE("LlamaForCausalLM::generate (batch) is its GPT's") {
  const LlamaForCausalLM<float> model(tiny_llama());
  const std::vector<Ids> out = model.generate(k_prompts, options(3, 0.7, 4));
  CHECK(out == model.gpt.generate(k_prompts, options(3, 0.7, 4)));
  CHECK(out[1] == model.generate(k_prompts[1], 3, 0.7, std::nullopt, 4 + k_row_seed_step));
}

TEST_CASE("KvCache: row starts mask the padding and count the positions") {
  KvCache<double> cache(2, 1, 1, 2, 6);
  CHECK(!cache.padded());
  cache.set_start(1, 2);
  CHECK(cache.padded());
  CHECK(cache.start(0) == 0);
  CHECK(cache.start(1) == 2);
  // 3 new rows after 1 cached: row b's query i sees keys start(b) <= j <= 1 + i.
  cache.append(0, xt::zeros<double>({2, 1, 1, 2}), xt::zeros<double>({2, 1, 1, 2}));
  const xt::xarray<bool> mask = cache.padded_causal_mask(0, 3);
  REQUIRE(mask.shape() == std::vector<std::size_t>{2, 1, 3, 4});
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t i = 0; i < 3; ++i)
      for (std::size_t j = 0; j < 4; ++j)
        CHECK(mask(b, 0, i, j) == (cache.start(b) <= j && j <= 1 + i));
  cache.clear();
  CHECK(!cache.padded());
  // A padded batch through GPT::forward equals each sequence alone (learned positions from the start).
  const GPT<double> model = spread_model<double>(GPTStyle::gpt2);
  KvCache<double> padded = model.make_cache(2);
  padded.set_start(0, 2);
  Indices ids = {{0, 0, 4, 7}, {3, 1, 4, 7}};
  Tape<double> tape;
  tape.set_grad_enabled(false);
  const xt::xarray<double> both =
      const_cast<GPT<double>&>(model).forward(tape, ids, padded).value();
  const xt::xarray<double> alone = model.infer(Indices{4, 7});
  check_close(xt::xarray<double>(xt::view(both, 0, xt::range(2, 4), xt::all())), alone, 1e-12,
              1e-12);
  std::vector<Row> rows;
  auto bad = row_adder(rows);
  bad("set_start: row past the batch", [&] { cache.set_start(2, 0); }, Expect::invalid_argument,
      {"KvCache::set_start", "'row'", "batch 2"});
  bad("set_start: position at the capacity", [&] { cache.set_start(0, 6); },
      Expect::invalid_argument, {"KvCache::set_start", "'position'", "capacity 6"});
  bad("start: row past the batch", [&] { cache.start(2); }, Expect::invalid_argument,
      {"KvCache::start", "'row'"});
  bad("padded_causal_mask: no such layer", [&] { cache.padded_causal_mask(1, 1); },
      Expect::invalid_argument, {"KvCache::padded_causal_mask", "'layer'"});
  const auto snapshot = [&] {
    State s;
    s.add(cache.start(0));
    s.add(cache.start(1));
    s.add(cache.length(0));
    return s;
  };
  report("KvCache row starts", run_rows(rows, snapshot));
}

TEST_CASE("GPT::generate (batch): bad input") {
  const GPT<double> model = spread_model<double>(GPTStyle::gpt2);
  std::vector<Row> rows;
  auto bad = row_adder(rows);
  const auto with = [&](auto change) {
    GenerationOptions o = options(3, 1.0);
    change(o);
    return [&model, o] { model.generate(k_prompts, o); };
  };
  bad("no prompts", [&] { model.generate(std::vector<Ids>{}, options(2, 0.0)); },
      Expect::invalid_argument, {"GPT::generate", "'prompts'", "is empty"});
  bad("an empty prompt",
      [&] {
        model.generate({{1}, {}}, options(2, 0.0));
      },
      Expect::invalid_argument, {"GPT::generate", "'prompts'", "empty prompt at index 1"});
  bad("an id outside the vocabulary",
      [&] {
        model.generate({{1}, {2, 13}}, options(2, 0.0));
      },
      Expect::invalid_argument, {"GPT::generate", "'prompts'", "holds 13"});
  bad("a negative id", [&] { model.generate({{-1}}, options(2, 0.0)); }, Expect::invalid_argument,
      {"GPT::generate", "'prompts'", "holds -1"});
  bad("top_p 0", with([](GenerationOptions& o) { o.top_p = 0.0; }), Expect::invalid_argument,
      {"GPT::generate", "'top_p'", "(0, 1]"});
  bad("top_p above 1", with([](GenerationOptions& o) { o.top_p = 1.5; }), Expect::invalid_argument,
      {"GPT::generate", "'top_p'", "1.5"});
  bad("top_p NaN", with([](GenerationOptions& o) { o.top_p = k_nan; }), Expect::invalid_argument,
      {"GPT::generate", "'top_p'"});
  bad("negative temperature", with([](GenerationOptions& o) { o.temperature = -0.5; }),
      Expect::invalid_argument, {"GPT::generate", "'temperature'", "-0.5"});
  bad("infinite temperature", with([](GenerationOptions& o) { o.temperature = k_inf; }),
      Expect::invalid_argument, {"GPT::generate", "'temperature'"});
  bad("top_k 0", with([](GenerationOptions& o) { o.top_k = 0; }), Expect::invalid_argument,
      {"GPT::generate", "'top_k'"});
  bad("a stop token outside the vocabulary",
      with([](GenerationOptions& o) { o.stop_tokens = {13}; }), Expect::invalid_argument,
      {"GPT::generate", "'stop_tokens'", "holds 13"});
  const auto snapshot = [&] {
    State s;
    for (const auto& [name, p] : const_cast<GPT<double>&>(model).named_parameters()) s.add(*p);
    return s;
  };
  report("GPT::generate (batch)", run_rows(rows, snapshot));
}
