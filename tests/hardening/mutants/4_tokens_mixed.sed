# target: modules/functional.cpp
# Tokens leak into each other: every hidden vector gets 1% of the mean of the
# whole hidden tensor (over all tokens), built from engine ops so that the
# gradients stay consistent with the (wrong) forward and gradcheck still
# passes. Only value checks and the token-independence checks can see it.
s|^#include "\.\./engine/ops/linear\.hpp"$|#include "../engine/ops/elementwise.hpp"\n#include "../engine/ops/linear.hpp"\n#include "../engine/ops/reduce.hpp"|
s|^  return activation_linear(linear(x, w1, b1), activation, w2, b2);$|  const Var<T> hidden = linear(x, w1, b1);\n  return activation_linear(hidden + mean(hidden) * T(0.01), activation, w2, b2);|
