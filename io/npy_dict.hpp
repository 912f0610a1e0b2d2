#pragma once
// Internal: the header dict of a .npy file (npy_dict.cpp), such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }

#include <string>

#include "files.hpp"
#include "npy.hpp"

namespace xtgrad::detail {

// Parses the header dict `text` of `file` (descr, fortran_order and shape;
// nothing else is checked here) into `header`.
void parse_npy_dict(const InputFile& file, const std::string& text, NpyHeader& header);

}  // namespace xtgrad::detail
