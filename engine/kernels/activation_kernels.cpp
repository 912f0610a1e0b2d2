#include "activation_kernels.hpp"

#include <algorithm>
#include <type_traits>
#include <utility>

#include "activation_formulas.hpp"  // first (through simd.hpp): see simd.hpp
#include "parallel.hpp"

namespace xtgrad::detail {

namespace {

using namespace simd_math;

// The last n % lanes elements: copied into a zero-padded batch-sized buffer
// so that they run through the same batch code as the rest.
template <class T>
struct Padded {
  T data[Batch<T>::size] = {};

  Padded(const T* source, std::size_t count) { std::copy(source, source + count, data); }
  Batch<T> load() const { return Batch<T>::load_unaligned(data); }
};

// How a kernel writes an output. A compile-time parameter, never a runtime
// bool inside the loop: GCC 12.2 at -O3 (AVX-512) turned a loop-invariant
// `accumulate ? value + old : value` on batch<double> into a masked add whose
// mask was the bool itself (kmovb 1: lane 0 only), dropping the += on the
// other lanes.
enum class Output { skip, write, add };

constexpr Output output_mode(const void* buffer, bool accumulate) {
  return buffer == nullptr ? Output::skip : accumulate ? Output::add : Output::write;
}

// Calls body(std::integral_constant<Output, mode>{}).
template <class Body>
void with_output(Output mode, Body&& body) {
  switch (mode) {
    case Output::skip:
      return body(std::integral_constant<Output, Output::skip>{});
    case Output::write:
      return body(std::integral_constant<Output, Output::write>{});
    case Output::add:
      return body(std::integral_constant<Output, Output::add>{});
  }
}

// An output that is a product a * b, written as such or added onto dst as
// fma(a, b, dst): one rounding, and the same in the body and in the tail (a
// product and a separate sum may be fused by the compiler in one place and
// not the other, and then an element's result would depend on where it lies).
template <class B>
struct Product {
  B a, b;
};

template <Output mode, class T>
void store(T* dst, const Product<Batch<T>>& p) {
  if constexpr (mode == Output::add)
    fused_multiply_add(p.a, p.b, Batch<T>::load_unaligned(dst)).store_unaligned(dst);
  else if constexpr (mode == Output::write)
    (p.a * p.b).store_unaligned(dst);
}

// A plain value: written, never added.
template <Output mode, class T>
void store(T* dst, const Batch<T>& value) {
  static_assert(mode != Output::add, "a value output is written, not accumulated");
  if constexpr (mode == Output::write) value.store_unaligned(dst);
}

// The last count < lanes elements, through the same batch arithmetic.
template <Output mode, class T>
void store_tail(T* dst, const Batch<T>& result, std::size_t count) {
  if constexpr (mode != Output::skip) {
    T buffer[Batch<T>::size];
    result.store_unaligned(buffer);
    std::copy(buffer, buffer + count, dst);
  }
}
template <Output mode, class T>
void store_tail(T* dst, const Product<Batch<T>>& p, std::size_t count) {
  if constexpr (mode == Output::add)
    store_tail<mode>(dst, fused_multiply_add(p.a, p.b, Padded<T>(dst, count).load()), count);
  else if constexpr (mode == Output::write)
    store_tail<mode>(dst, Batch<T>(p.a * p.b), count);
}

template <class Act, class T>
void forward_pass(const T* x, T* y, std::size_t n) {
  constexpr std::size_t lanes = Batch<T>::size;
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes)
    store<Output::write>(y + i, Act::value(Batch<T>::load_unaligned(x + i)));
  if (i < n) store_tail<Output::write>(y + i, Act::value(Padded<T>(x + i, n - i).load()), n - i);
}

// One batch of the backward pass: dx = dy f'(x), and y = f(x) when y is
// wanted (value_and_slope shares erf / exp between the two).
template <class Act, Output dx_mode, Output y_mode, class T>
void backward_batch(const Batch<T>& x, const Batch<T>& dy, T* dx, T* y, std::size_t count) {
  constexpr std::size_t lanes = Batch<T>::size;
  if constexpr (y_mode != Output::skip) {
    const ValueSlope<Batch<T>> f = Act::value_and_slope(x);
    if (count == lanes) {
      store<y_mode>(y, f.value);
      store<dx_mode>(dx, Product<Batch<T>>{dy, f.slope});
    } else {
      store_tail<y_mode>(y, f.value, count);
      store_tail<dx_mode>(dx, Product<Batch<T>>{dy, f.slope}, count);
    }
  } else if (count == lanes) {
    store<dx_mode>(dx, Product<Batch<T>>{dy, Act::slope(x)});
  } else {
    store_tail<dx_mode>(dx, Product<Batch<T>>{dy, Act::slope(x)}, count);
  }
}

template <class Act, Output dx_mode, Output y_mode, class T>
void backward_pass(const T* x, const T* dy, T* dx, T* y, std::size_t n) {
  constexpr std::size_t lanes = Batch<T>::size;
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes)
    backward_batch<Act, dx_mode, y_mode>(Batch<T>::load_unaligned(x + i),
                                         Batch<T>::load_unaligned(dy + i), dx + i,
                                         y_mode == Output::skip ? y : y + i, lanes);
  if (i < n) {
    const std::size_t rest = n - i;
    backward_batch<Act, dx_mode, y_mode>(Padded<T>(x + i, rest).load(),
                                         Padded<T>(dy + i, rest).load(), dx + i,
                                         y_mode == Output::skip ? y : y + i, rest);
  }
}

template <class Act, class T>
void gated_forward_pass(const T* u, const T* g, T* y, std::size_t n) {
  constexpr std::size_t lanes = Batch<T>::size;
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes)
    store<Output::write>(
        y + i, Batch<T>::load_unaligned(u + i) * Act::value(Batch<T>::load_unaligned(g + i)));
  if (i < n) {
    const std::size_t rest = n - i;
    store_tail<Output::write>(
        y + i, Padded<T>(u + i, rest).load() * Act::value(Padded<T>(g + i, rest).load()), rest);
  }
}

// One batch of gated_backward: du = dy f(g), dg = (dy u) f'(g) as products,
// y = u f(g). Only what is wanted is computed; the rest is left zero.
template <class B>
struct GatedGrads {
  Product<B> du, dg;
  B y;
};

template <class Act, bool want_du, bool want_dg, bool want_y, class B>
GatedGrads<B> gated_grads(const B& u, const B& g, const B& dy) {
  const B zero = broadcast<B>(0);
  constexpr bool want_value = want_du || want_y;
  if constexpr (want_value && want_dg) {
    const ValueSlope<B> f = Act::value_and_slope(g);
    return {{dy, want_du ? f.value : zero}, {dy * u, f.slope}, want_y ? u * f.value : zero};
  } else if constexpr (want_value) {
    const B f = Act::value(g);
    return {{dy, want_du ? f : zero}, {zero, zero}, want_y ? u * f : zero};
  } else {
    return {{zero, zero}, {dy * u, Act::slope(g)}, zero};
  }
}

template <class Act, Output du_mode, Output dg_mode, Output y_mode, class T>
void gated_backward_pass(const T* u, const T* g, const T* dy, T* du, T* dg, T* y, std::size_t n) {
  constexpr bool want_du = du_mode != Output::skip, want_dg = dg_mode != Output::skip,
                 want_y = y_mode != Output::skip;
  if constexpr (want_du || want_dg || want_y) {
    constexpr std::size_t lanes = Batch<T>::size;
    std::size_t i = 0;
    for (; i + lanes <= n; i += lanes) {
      const GatedGrads<Batch<T>> r = gated_grads<Act, want_du, want_dg, want_y>(
          Batch<T>::load_unaligned(u + i), Batch<T>::load_unaligned(g + i),
          want_du || want_dg ? Batch<T>::load_unaligned(dy + i) : Batch<T>(T(0)));
      store<du_mode>(du_mode == Output::skip ? du : du + i, r.du);
      store<dg_mode>(dg_mode == Output::skip ? dg : dg + i, r.dg);  // after du: they may alias
      store<y_mode>(y_mode == Output::skip ? y : y + i, r.y);
    }
    if (i < n) {
      const std::size_t rest = n - i;
      const GatedGrads<Batch<T>> r = gated_grads<Act, want_du, want_dg, want_y>(
          Padded<T>(u + i, rest).load(), Padded<T>(g + i, rest).load(),
          want_du || want_dg ? Padded<T>(dy + i, rest).load() : Batch<T>(T(0)));
      store_tail<du_mode>(du_mode == Output::skip ? du : du + i, r.du, rest);
      store_tail<dg_mode>(dg_mode == Output::skip ? dg : dg + i, r.dg, rest);
      store_tail<y_mode>(y_mode == Output::skip ? y : y + i, r.y, rest);
    }
  }
}

// Elements a thread must have before a second one pays: relu is a compare
// per element, the others evaluate erf, tanh or exp.
std::size_t min_per_thread(Activation activation) {
  return activation == Activation::relu ? k_parallel_light : k_parallel_heavy;
}

// p + begin, or null for an output that is skipped.
template <class P>
P* at(P* p, std::size_t begin) {
  return p ? p + begin : p;
}

}  // namespace

// Each kernel below splits its n elements over the threads in use
// (parallel.hpp): an element's result does not depend on where it lies.

template <class T>
void activation_forward(Activation activation, const T* x, T* y, std::size_t n) {
  dispatch(activation, "activation_forward", [&](auto act) {
    parallel_for(n, min_per_thread(activation), [&](std::size_t b, std::size_t e) {
      forward_pass<decltype(act)>(x + b, y + b, e - b);
    });
  });
}

template <class T>
void activation_backward(Activation activation, const T* x, const T* dy, T* dx, std::size_t n,
                         bool accumulate) {
  activation_value_and_backward(activation, x, dy, dx, accumulate, static_cast<T*>(nullptr), n);
}

template <class T>
void activation_value_and_backward(Activation activation, const T* x, const T* dy, T* dx,
                                   bool accumulate, T* y, std::size_t n) {
  dispatch(activation, "activation_backward", [&](auto act) {
    using Act = decltype(act);
    with_output(accumulate ? Output::add : Output::write, [&](auto dx_mode) {
      with_output(output_mode(y, false), [&](auto y_mode) {
        if constexpr (dx_mode.value != Output::skip && y_mode.value != Output::add)
          parallel_for(n, min_per_thread(activation), [&](std::size_t b, std::size_t e) {
            backward_pass<Act, dx_mode.value, y_mode.value>(x + b, dy + b, dx + b, at(y, b), e - b);
          });
      });
    });
  });
}

template <class T>
void gated_forward(Activation activation, const T* u, const T* g, T* y, std::size_t n) {
  dispatch(activation, "gated_forward", [&](auto act) {
    parallel_for(n, min_per_thread(activation), [&](std::size_t b, std::size_t e) {
      gated_forward_pass<decltype(act)>(u + b, g + b, y + b, e - b);
    });
  });
}

template <class T>
void gated_backward(Activation activation, const T* u, const T* g, const T* dy, T* du,
                    bool du_accumulate, T* dg, bool dg_accumulate, std::size_t n) {
  gated_value_and_backward(activation, u, g, dy, du, du_accumulate, dg, dg_accumulate,
                           static_cast<T*>(nullptr), n);
}

template <class T>
void gated_value_and_backward(Activation activation, const T* u, const T* g, const T* dy, T* du,
                              bool du_accumulate, T* dg, bool dg_accumulate, T* y, std::size_t n) {
  dispatch(activation, "gated_backward", [&](auto act) {
    using Act = decltype(act);
    with_output(output_mode(du, du_accumulate), [&](auto du_mode) {
      with_output(output_mode(dg, dg_accumulate), [&](auto dg_mode) {
        with_output(output_mode(y, false), [&](auto y_mode) {
          if constexpr (y_mode.value != Output::add)
            parallel_for(n, min_per_thread(activation), [&](std::size_t b, std::size_t e) {
              gated_backward_pass<Act, du_mode.value, dg_mode.value, y_mode.value>(
                  u + b, g + b, at(dy, b), at(du, b), at(dg, b), at(y, b), e - b);
            });
        });
      });
    });
  });
}

#define XTGRAD_INSTANTIATE_ACTIVATION_KERNELS(T)                                                \
  template void activation_forward<T>(Activation, const T*, T*, std::size_t);                   \
  template void activation_backward<T>(Activation, const T*, const T*, T*, std::size_t, bool);  \
  template void gated_forward<T>(Activation, const T*, const T*, T*, std::size_t);              \
  template void gated_backward<T>(Activation, const T*, const T*, const T*, T*, bool, T*, bool, \
                                  std::size_t);                                                 \
  template void activation_value_and_backward<T>(Activation, const T*, const T*, T*, bool, T*,  \
                                                 std::size_t);                                  \
  template void gated_value_and_backward<T>(Activation, const T*, const T*, const T*, T*, bool, \
                                            T*, bool, T*, std::size_t);
XTGRAD_INSTANTIATE_ACTIVATION_KERNELS(float)
XTGRAD_INSTANTIATE_ACTIVATION_KERNELS(double)
#undef XTGRAD_INSTANTIATE_ACTIVATION_KERNELS

}  // namespace xtgrad::detail
