# target: modules/functional.cpp
# gated_feedforward reads w_down [H, Cout] in PyTorch's [out, in] layout, i.e.
# multiplies by w_down^T (the shapes were checked for [H, Cout] before, so
# this reads the same elements in the wrong order: wrong values, no error).
s|^  return record_gated_linear<T>(dims.down, u, g, activation, w_down, b_down, WeightLayout::in_out);$|  return record_gated_linear<T>(dims.down, u, g, activation, w_down, b_down, WeightLayout::out_in);|
