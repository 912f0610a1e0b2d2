#pragma once
// Everything in modules/: Module, Linear, Conv1D, Mlp, Sequential, the FFN
// family, the norms, Dropout, Embedding, PreNormResidual, the attention
// modules, TransformerBlock, GPT and its KvCache, LoRA adapters, the functional API, module
// checkpoints (Module::save / load, safetensors_checkpoint.hpp) and the
// Hugging Face loaders (pretrained/). The file formats themselves are io/
// (io/io.hpp); the Batcher is data/ (data/data.hpp).

#include "attention.hpp"
#include "conv1d.hpp"
#include "dropout.hpp"
#include "embedding.hpp"
#include "feed_forward.hpp"
#include "functional.hpp"
#include "gated_ffn.hpp"
#include "gpt.hpp"
#include "gpt2_mlp.hpp"
#include "init.hpp"
#include "kv_cache.hpp"
#include "linear.hpp"
#include "lora.hpp"
#include "lora_layer.hpp"
#include "mlp.hpp"
#include "module.hpp"
#include "moe.hpp"
#include "norm.hpp"
#include "positionwise_ffn.hpp"
#include "pre_norm_residual.hpp"
#include "pretrained/hf_config.hpp"
#include "pretrained/hf_gpt2.hpp"
#include "pretrained/hf_llama.hpp"
#include "pretrained/hf_llama_config.hpp"
#include "pretrained/hf_mlp.hpp"
#include "recompute_modules.hpp"
#include "safetensors_checkpoint.hpp"
#include "sequential.hpp"
#include "state_mapping.hpp"
#include "tensor_dict.hpp"
#include "transformer_block.hpp"
