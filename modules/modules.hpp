#pragma once
// Everything in modules/: Module, Linear, the FFN family, the functional API
// and .npy / checkpoint I/O (modules/io).

#include "feed_forward.hpp"
#include "functional.hpp"
#include "gated_ffn.hpp"
#include "init.hpp"
#include "io/checkpoint.hpp"
#include "io/npy.hpp"
#include "io/state_directory.hpp"
#include "linear.hpp"
#include "module.hpp"
#include "positionwise_ffn.hpp"
