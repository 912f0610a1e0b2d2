# target: modules/functional.cpp
# feedforward_sublayer uses the tanh approximation of GELU instead of the
# exact erf GELU (they differ by at most ~5e-4 per hidden unit).
s|^  return two_layer(x, weight1, bias1, weight2, bias2, Activation::gelu);$|  return two_layer(x, weight1, bias1, weight2, bias2, Activation::gelu_tanh);|
