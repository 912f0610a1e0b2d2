# target: modules/functional.cpp
# Tokens leak into each other: every hidden vector gets 1% of the mean of the
# whole hidden tensor (over all tokens), built from engine ops so that the
# gradients stay consistent with the (wrong) forward and gradcheck still
# passes. Only value checks and the token-independence checks can see it.
s|^#include "\.\./engine/ops/fused_linear\.hpp"$|#include "../engine/ops/elementwise.hpp"\n#include "../engine/ops/fused_linear.hpp"\n#include "../engine/ops/reduce.hpp"|
s|^  return record_activation_linear<T>(dims.second, hidden, activation, w2, b2, WeightLayout::out_in);$|  return record_activation_linear<T>(dims.second, hidden + mean(hidden) * T(0.01), activation, w2, b2, WeightLayout::out_in);|
