# target: modules/functional.cpp
# positionwise_ffn loses its ReLU: relu(x w1^T + b1) w2^T + b2 becomes
# (x w1^T + b1) w2^T + b2, two linear layers and hence one linear map.
# feedforward (and the modules) keep their activation: only the seed
# function is wrong.
s|^  return detail::record_two_layer(dims, x, w1, b1, w2, b2, Activation::relu);$|  return detail::record_linear<T>(dims.second, detail::record_linear<T>(dims.first, x, w1, b1, WeightLayout::out_in), w2, b2, WeightLayout::out_in);|
