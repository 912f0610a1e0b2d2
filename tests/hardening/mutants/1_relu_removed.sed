# target: modules/functional.cpp
# positionwise_ffn loses its ReLU: relu(x w1^T + b1) w2^T + b2 becomes
# (x w1^T + b1) w2^T + b2, two linear layers and hence one linear map.
# feedforward (and the modules) keep their activation: only the seed
# function is wrong.
s|^  return two_layer(x, w1, b1, w2, b2, Activation::relu);$|  return linear(linear(x, w1, b1), w2, b2);|
