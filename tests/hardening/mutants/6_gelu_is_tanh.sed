# target: modules/functional.cpp
# feedforward_sublayer uses the tanh approximation of GELU instead of the
# exact erf GELU (they differ by at most ~5e-4 per hidden unit).
s|^  return detail::record_two_layer(dims, x, weight1, bias1, weight2, bias2, Activation::gelu);$|  return detail::record_two_layer(dims, x, weight1, bias1, weight2, bias2, Activation::gelu_tanh);|
