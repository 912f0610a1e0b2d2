# target: modules/functional.cpp
# gated_feedforward reads w_down [H, Cout] in PyTorch's [out, in] layout, i.e.
# multiplies by w_down^T. With H == Cout it runs and gives wrong values; with
# H != Cout the fused op throws on the shapes.
s|^  return gated_linear(u, g, activation, w_down, b_down, WeightLayout::in_out);$|  return gated_linear(u, g, activation, w_down, b_down, WeightLayout::out_in);|
