# target: modules/functional.cpp
# gated_feedforward reads w_down [H, Cout] in PyTorch's [out, in] layout, i.e.
# multiplies by w_down^T. With H == Cout it runs and gives wrong values; with
# H != Cout linear() throws on the shapes.
s|^  return linear(gated(u, g, activation), w_down, b_down, WeightLayout::in_out);$|  return linear(gated(u, g, activation), w_down, b_down, WeightLayout::out_in);|
