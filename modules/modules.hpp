#pragma once
// Everything in modules/: Module, Linear, the FFN family, the functional API
// and .npy / checkpoint I/O (modules/io).

#include "data/batcher.hpp"
#include "feed_forward.hpp"
#include "functional.hpp"
#include "gated_ffn.hpp"
#include "init.hpp"
#include "io/checkpoint.hpp"
#include "io/hf_mlp.hpp"
#include "io/idx.hpp"
#include "io/npy.hpp"
#include "io/safetensors.hpp"
#include "linear.hpp"
#include "module.hpp"
#include "positionwise_ffn.hpp"
