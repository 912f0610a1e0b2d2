#pragma once
// Everything in io/: the file formats, below modules/ and training/ (which
// use them) and knowing nothing of either. .npy arrays (npy.hpp),
// safetensors files (safetensors.hpp), IDX files (idx.hpp), checkpoint
// directories of named Parameters (checkpoint.hpp) and the ModuleConfig they
// record (module_config.hpp), and training-state directories
// (state_directory.hpp).

#include "checkpoint.hpp"
#include "idx.hpp"
#include "module_config.hpp"
#include "npy.hpp"
#include "safetensors.hpp"
#include "state_directory.hpp"
