#pragma once
// Everything in modules/: Module, Linear, Mlp, Sequential, the FFN family,
// the norms, Dropout, Embedding, PreNormResidual, the functional API
// the Batcher, and .npy / safetensors / IDX / checkpoint I/O (modules/io).

#include "checkpoint_modules.hpp"
#include "data/batcher.hpp"
#include "dropout.hpp"
#include "embedding.hpp"
#include "feed_forward.hpp"
#include "functional.hpp"
#include "gated_ffn.hpp"
#include "init.hpp"
#include "io/checkpoint.hpp"
#include "io/hf_mlp.hpp"
#include "io/idx.hpp"
#include "io/npy.hpp"
#include "io/safetensors.hpp"
#include "io/safetensors_checkpoint.hpp"
#include "io/state_directory.hpp"
#include "linear.hpp"
#include "mlp.hpp"
#include "module.hpp"
#include "module_config.hpp"
#include "norm.hpp"
#include "positionwise_ffn.hpp"
#include "pre_norm_residual.hpp"
#include "sequential.hpp"
#include "tensor_dict.hpp"
