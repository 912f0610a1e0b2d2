# target: modules/functional.cpp
# gated_feedforward activates the up branch instead of the gate:
# (f(u) * g) w_down instead of (u * f(g)) w_down.
s|^  return record_gated_linear<T>(dims.down, u, g, activation, w_down, b_down, WeightLayout::in_out);$|  return record_gated_linear<T>(dims.down, g, u, activation, w_down, b_down, WeightLayout::in_out);|
