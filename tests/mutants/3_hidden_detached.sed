# target: modules/functional.cpp
# The hidden activations are detached from the tape: the second layer reads a
# fresh leaf (requires_grad = false) holding a copy of their value. Forward
# values are unchanged; no gradient reaches w1, b1 or x (w2 and b2 still get
# theirs).
s|^  return linear(xtgrad::activation(linear(x, w1, b1), activation), w2, b2);$|  const Var<T> hidden = xtgrad::activation(linear(x, w1, b1), activation);\n  const xt::xarray<T> value = hidden.value();  // a copy: leaf() may move the nodes\n  return linear(hidden.tape().leaf(value, false), w2, b2);|
