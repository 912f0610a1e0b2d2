#include "activation_derivative_kernels.hpp"

#include <algorithm>
#include <string>
#include <type_traits>

#include "activation_derivatives.hpp"  // before xtensor (through simd.hpp): see simd.hpp

#include "../errors.hpp"
#include "parallel.hpp"

namespace xtgrad::detail {

namespace {

using namespace simd_math;

// count < lanes elements of src as a zero-padded batch.
template <class T>
Batch<T> load_padded(const T* src, std::size_t count) {
  T buffer[Batch<T>::size] = {};
  std::copy(src, src + count, buffer);
  return Batch<T>::load_unaligned(buffer);
}

template <class T>
void store_partial(T* dst, const Batch<T>& value, std::size_t count) {
  T buffer[Batch<T>::size];
  value.store_unaligned(buffer);
  std::copy(buffer, buffer + count, dst);
}

// y = f^(Order)(x) over [0, n).
template <int Order, class Act, class T>
void derivative_pass(const T* x, T* y, std::size_t n) {
  constexpr std::size_t lanes = Batch<T>::size;
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes)
    derivative<Order, Act>(Batch<T>::load_unaligned(x + i)).store_unaligned(y + i);
  if (i < n) store_partial(y + i, derivative<Order, Act>(load_padded(x + i, n - i)), n - i);
}

// dx = dy f^(Order)(x), or dx = fma(dy, f^(Order)(x), dx) when Add: a
// template parameter, never a runtime bool over batches (GCC 12 at -O3, see
// activation_kernels.cpp).
template <int Order, class Act, bool Add, class T>
void product_pass(const T* x, const T* dy, T* dx, std::size_t n) {
  constexpr std::size_t lanes = Batch<T>::size;
  const auto result = [](const Batch<T>& xb, const Batch<T>& dyb, const Batch<T>& old) {
    const Batch<T> slope = derivative<Order, Act>(xb);
    if constexpr (Add)
      return fused_multiply_add(dyb, slope, old);
    else
      return Batch<T>(dyb * slope);
  };
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const Batch<T> old = Add ? Batch<T>::load_unaligned(dx + i) : Batch<T>(T(0));
    result(Batch<T>::load_unaligned(x + i), Batch<T>::load_unaligned(dy + i), old)
        .store_unaligned(dx + i);
  }
  if (i < n) {
    const std::size_t rest = n - i;
    const Batch<T> old = Add ? load_padded(dx + i, rest) : Batch<T>(T(0));
    store_partial(dx + i, result(load_padded(x + i, rest), load_padded(dy + i, rest), old), rest);
  }
}

// Calls body(std::integral_constant<int, order>{}) for order in [Lo, Hi];
// std::invalid_argument from `op` naming 'order' otherwise.
template <int Lo, int Hi, class Body>
void with_order(int order, const char* op, Body&& body) {
  if (order < Lo || order > Hi)
    fail_argument(op, "order",
                  "is " + std::to_string(order) + ", expected a value in [" + std::to_string(Lo) +
                      ", " + std::to_string(Hi) + "]");
  if constexpr (Lo < Hi) {
    if (order == Lo) return body(std::integral_constant<int, Lo>{});
    return with_order<Lo + 1, Hi>(order, op, body);
  } else {
    return body(std::integral_constant<int, Lo>{});
  }
}

// relu's derivatives cost a compare, the others erf or exp.
std::size_t derivative_min_per_thread(Activation activation) {
  return activation == Activation::relu ? k_parallel_light : k_parallel_heavy;
}

}  // namespace

template <class T>
void activation_derivative_forward(Activation activation, int order, const T* x, T* y,
                                   std::size_t n) {
  static constexpr const char* op = "activation_derivative_forward";
  with_order<1, 3>(order, op, [&](auto order_c) {
    dispatch(activation, op, [&](auto act) {
      parallel_for(n, derivative_min_per_thread(activation), [&](std::size_t b, std::size_t e) {
        derivative_pass<decltype(order_c)::value, decltype(act)>(x + b, y + b, e - b);
      });
    });
  });
}

template <class T>
void activation_derivative_backward(Activation activation, int order, const T* x, const T* dy,
                                    T* dx, std::size_t n, bool accumulate) {
  static constexpr const char* op = "activation_derivative_backward";
  // the backward of order k multiplies by the derivative of order k + 1
  with_order<1, 2>(order, op, [&](auto order_c) {
    dispatch(activation, op, [&](auto act) {
      constexpr int k = decltype(order_c)::value + 1;
      using Act = decltype(act);
      parallel_for(n, derivative_min_per_thread(activation), [&](std::size_t b, std::size_t e) {
        if (accumulate)
          product_pass<k, Act, true>(x + b, dy + b, dx + b, e - b);
        else
          product_pass<k, Act, false>(x + b, dy + b, dx + b, e - b);
      });
    });
  });
}

#define XTGRAD_INSTANTIATE_DERIVATIVE_KERNELS(T)                                              \
  template void activation_derivative_forward<T>(Activation, int, const T*, T*, std::size_t); \
  template void activation_derivative_backward<T>(Activation, int, const T*, const T*, T*,    \
                                                  std::size_t, bool);
XTGRAD_INSTANTIATE_DERIVATIVE_KERNELS(float)
XTGRAD_INSTANTIATE_DERIVATIVE_KERNELS(double)
#undef XTGRAD_INSTANTIATE_DERIVATIVE_KERNELS

}  // namespace xtgrad::detail
