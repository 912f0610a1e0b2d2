#pragma once
// Internal (not included by any public header): the .npy reader and writer
// in the pieces the checkpoint code needs. It opens each file itself (inside
// the checkpoint directory) and compares the header with its parameter
// before any data is read or allocated. The format's constants are here; the
// pieces are declared beside their definitions: npy_dict.hpp (the header
// dict), npy_reader.hpp (header checks and data), npy_writer.hpp (writing).

#include <cstddef>

#include "npy_dict.hpp"
#include "npy_reader.hpp"
#include "npy_writer.hpp"
