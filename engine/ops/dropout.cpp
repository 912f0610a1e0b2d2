#include "dropout.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "../check.hpp"
#include "../errors.hpp"
#include "../kernels/counter_rng.hpp"

namespace xtgrad {

namespace {

constexpr const char* op_name = "dropout";

// out[i] (+)= m_i * in[i] * scale, m_i = [word_i >= threshold], for the
// words of `key` (the mask of dropout's forward and of its backward).
template <class T, bool Accumulate>
void masked_scale(const DropoutKey& key, std::uint32_t threshold, T scale, const T* in, T* out,
                  std::size_t n) {
  detail::uniform_words(key.seed, key.step, key.first_element, n,
                        [=](std::size_t i0, const std::uint32_t* words, std::size_t count) {
                          const T* a = in + i0;
                          T* b = out + i0;
                          for (std::size_t j = 0; j < count; ++j) {
                            const T kept = words[j] >= threshold ? a[j] * scale : T(0);
                            if constexpr (Accumulate)
                              b[j] += kept;
                            else
                              b[j] = kept;
                          }
                        });
}

}  // namespace

template <class T>
Var<T> dropout(const Var<T>& x, double p, bool training, const DropoutKey& key) {
  Tape<T>& tape = detail::common_tape<T>(op_name, {{"x", &x}});
  if (!(p >= 0.0 && p <= 1.0))
    detail::fail_argument(op_name, "p",
                          "is " + detail::number_str(p) + ", expected a probability in [0, 1]");

  // u >= p with u = word / 2^32 exactly when word >= ceil(p 2^32) (p 2^32 is
  // exact in double); a threshold of 2^32 keeps nothing, like p == 1.
  const double threshold_real = std::ceil(std::ldexp(p, 32));
  const bool identity = !training || p == 0.0;
  const bool keeps_nothing = threshold_real >= std::ldexp(1.0, 32);
  const bool all_dropped = !identity && keeps_nothing;
  // (2^32 itself does not fit the threshold's type: p == 1 never reaches the mask)
  const auto threshold = keeps_nothing ? 0u : static_cast<std::uint32_t>(threshold_real);
  const T scale = all_dropped ? T(0) : static_cast<T>(1.0 / (1.0 - p));

  const std::size_t xi = x.index();
  const std::size_t yi = tape.record(op_name, {xi}, x.requires_grad());
  const xt::xarray<T>& xv = tape.value(xi);
  xt::xarray<T>& y = tape.value_mut(yi);
  y.resize(xv.shape());
  const std::size_t n = xv.size();
  if (identity)  // y[x] = x[x]
    std::copy(xv.data(), xv.data() + n, y.data());
  else if (all_dropped)  // y[x] = 0
    std::fill(y.data(), y.data() + n, T(0));
  else  // y[x] = m[x] * x[x] / (1 - p)
    masked_scale<T, false>(key, threshold, scale, xv.data(), y.data(), n);

  tape.set_backward(
      yi, [xi, key, identity, all_dropped, threshold, scale](Tape<T>& t, const xt::xarray<T>& dy) {
        if (!t.requires_grad(xi)) return;
        GradSlot<T> dx = t.grad_slot(xi);
        T* d = dx.buffer.data();
        const T* g = dy.data();
        const std::size_t count = dy.size();
        if (identity) {  // dx[x] (+)= dy[x]
          if (dx.accumulate)
            for (std::size_t i = 0; i < count; ++i) d[i] += g[i];
          else
            std::copy(g, g + count, d);
        } else if (all_dropped) {  // dx[x] (+)= 0
          if (!dx.accumulate) std::fill(d, d + count, T(0));
        } else if (dx.accumulate) {  // dx[x] += m[x] * dy[x] / (1 - p), m recomputed from key
          masked_scale<T, true>(key, threshold, scale, g, d, count);
        } else {  // dx[x] = m[x] * dy[x] / (1 - p)
          masked_scale<T, false>(key, threshold, scale, g, d, count);
        }
      });
  return tape.var(yi);
}

template Var<float> dropout(const Var<float>&, double, bool, const DropoutKey&);
template Var<double> dropout(const Var<double>&, double, bool, const DropoutKey&);

}  // namespace xtgrad
