#pragma once
// Everything in data/: mini-batches of an in-memory data set. Batcher
// (batcher.hpp), one process's seeded shuffle, and DistributedSampler
// (distributed_sampler.hpp), one rank's slice of the same global batches;
// and text to token ids, BpeTokenizer (bpe_tokenizer.hpp), the byte-level
// BPE of GPT-2, LLaMA-3, Qwen2 and SmolLM, and CharTokenizer
// (char_tokenizer.hpp), one id per character; next_token_windows
// (token_windows.hpp), the inputs and targets of next-token prediction from
// windows of a token sequence; counter_key (counter_key.hpp), the key of a
// draw that depends on its counters alone.

#include "batcher.hpp"
#include "bpe_tokenizer.hpp"
#include "char_tokenizer.hpp"
#include "counter_key.hpp"
#include "distributed_sampler.hpp"
#include "token_windows.hpp"
