# target: modules/functional.cpp
# The first layer forgets its bias: f(x w1^T) w2^T + b2 in positionwise_ffn,
# feedforward_sublayer, feedforward and the modules (b1 is still shape-checked, then unused).
s|^  const Var<T> hidden = record_linear<T>(dims.first, x, w1, b1, WeightLayout::out_in);  // \[\.\.\., H\]$|  const Var<T> hidden = record_linear<T>(dims.first, x, w1, std::nullopt, WeightLayout::out_in);|
