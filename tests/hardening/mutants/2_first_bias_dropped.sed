# target: modules/functional.cpp
# The first layer forgets its bias: f(x w1^T) w2^T + b2 in positionwise_ffn,
# feedforward_sublayer and feedforward (b1 is still shape-checked, then unused).
s|^  return activation_linear(linear(x, w1, b1), activation, w2, b2);$|  return activation_linear(linear(x, w1), activation, w2, b2);|
