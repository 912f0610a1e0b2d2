#pragma once
// The pointwise activation functions of xtgrad: their names, formulas and
// derivatives. The vectorized kernels are in activation_kernels.hpp, the
// recorded ops in ops/activations.hpp and ops/gated.hpp.
//
//   relu          f(x) = max(x, 0)
//                 f'(x) = 1 if x > 0 else 0; relu'(0) = 0, PyTorch's convention.
//   gelu          the exact GELU (Hendrycks & Gimpel 2016), torch gelu(approximate='none'):
//                 f(x) = x Phi(x) = 0.5 x (1 + erf(x / sqrt 2))
//                 f'(x) = Phi(x) + x phi(x),   phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
//   gelu_tanh     the tanh approximation of GELU, torch gelu(approximate='tanh'):
//                 f(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
//                 f'(x) = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
//   gelu_sigmoid  the sigmoid approximation of GELU (Hendrycks & Gimpel 2016, sec. 2):
//                 f(x) = x sigmoid(1.702 x)
//                 f'(x) = s + 1.702 x s (1 - s),  s = sigmoid(1.702 x)
//   silu          SiLU / Swish-1 (Elfwing et al. 2017), torch silu:
//                 f(x) = x sigmoid(x)
//                 f'(x) = s (1 + x (1 - s)),  s = sigmoid(x)
//   tanh          the hyperbolic tangent, torch tanh (the activation of the
//                 original MLPs and of many PINNs; the same values as the
//                 elementwise op tanh in ops/math.hpp):
//                 f(x) = tanh(x)
//                 f'(x) = 1 - tanh^2(x) = 4 s (1 - s),  s = sigmoid(2x)
//
// Limits: every f and f' is finite for finite x (no overflow for |x| up to
// the largest float/double) and takes its limit at +-inf: f(+inf) = +inf,
// f(-inf) = 0, f'(+inf) = 1, f'(-inf) = 0, except tanh, which is bounded:
// tanh(+-inf) = +-1, tanh'(+-inf) = 0. f(NaN) is NaN.

#include <optional>
#include <string>
#include <string_view>

namespace xtgrad {

enum class Activation { relu, gelu, gelu_tanh, gelu_sigmoid, silu, tanh };

// "relu", "gelu", "gelu_tanh", "gelu_sigmoid", "silu" or "tanh" (exact, case-sensitive).
// Throws std::invalid_argument listing the valid names for any other string.
Activation parse_activation(std::string_view name);

// The name parse_activation accepts for `activation`. Throws
// std::invalid_argument for a value outside the enumeration.
std::string_view to_string(Activation activation);

namespace detail {

// to_string as a NUL-terminated literal (a tape op name); throws
// std::invalid_argument naming `op` and `arg` for a value outside the enumeration.
const char* activation_name(Activation activation, const char* op, const char* arg);

// The activation called `name`, or nothing (parse_activation without its error).
std::optional<Activation> find_activation(std::string_view name);

// The names parse_activation accepts, in enumeration order: "relu, gelu, ...".
std::string valid_activation_names();

}  // namespace detail

}  // namespace xtgrad
