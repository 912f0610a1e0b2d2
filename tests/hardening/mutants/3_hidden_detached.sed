# target: modules/functional.cpp
# The hidden layer is detached from the tape: the fused second layer reads a
# fresh leaf (requires_grad = false) holding a copy of the first layer's
# output. Forward values are unchanged; no gradient reaches w1, b1 or x (w2
# and b2 still get theirs).
s|^  return record_activation_linear<T>(dims.second, hidden, activation, w2, b2, WeightLayout::out_in);$|  const xt::xarray<T> value = hidden.value();  // a copy: leaf() may move the nodes\n  return record_activation_linear<T>(dims.second, hidden.tape().leaf(value, false), activation, w2, b2, WeightLayout::out_in);|
