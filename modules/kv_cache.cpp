#include "kv_cache.hpp"

#include <algorithm>
#include <string>

#include "../engine/checked_size.hpp"
#include "../engine/errors.hpp"
#include "../engine/ops/attention.hpp"

namespace xtgrad {

namespace {

constexpr const char* k_cache_owner = "KvCache";
constexpr const char* k_cache_sizes =
    "arguments 'batch', 'n_layers', 'n_kv_heads', 'head_dim' and 'capacity'";

// The elements of all keys and values: 2 n_layers [batch, n_kv_heads,
// capacity, head_dim] buffers, checked to fit memory (checked_size.hpp).
detail::WideCount cache_elements(std::size_t batch, std::size_t n_layers, std::size_t n_kv_heads,
                                 std::size_t head_dim, std::size_t capacity) {
  return detail::WideCount(2) * n_layers * batch * n_kv_heads * capacity * head_dim;
}

}  // namespace

template <class T>
KvCache<T>::KvCache(std::size_t batch, std::size_t n_layers, std::size_t n_kv_heads,
                    std::size_t head_dim, std::size_t capacity) try
    : batch_(batch), n_kv_heads_(n_kv_heads), head_dim_(head_dim), capacity_(capacity) {
  detail::check_positive_size(k_cache_owner, "batch", batch);
  detail::check_positive_size(k_cache_owner, "n_layers", n_layers);
  detail::check_positive_size(k_cache_owner, "n_kv_heads", n_kv_heads);
  detail::check_positive_size(k_cache_owner, "head_dim", head_dim);
  detail::check_positive_size(k_cache_owner, "capacity", capacity);
  const std::vector<std::size_t> shape = {batch, n_kv_heads, capacity, head_dim};
  detail::check_bytes(k_cache_owner, k_cache_sizes, "keys and values",
                      cache_elements(batch, n_layers, n_kv_heads, head_dim, capacity), sizeof(T));
  k_.assign(n_layers, xt::zeros<T>(shape));
  v_.assign(n_layers, xt::zeros<T>(shape));
  length_.assign(n_layers, 0);
  start_.assign(batch, 0);
} catch (const std::bad_alloc& e) {
  detail::rethrow_out_of_memory(k_cache_owner, "keys and values",
                                cache_elements(batch, n_layers, n_kv_heads, head_dim, capacity),
                                sizeof(T), e);
}

template <class T>
void KvCache<T>::check_layer(const char* owner, std::size_t layer) const {
  detail::Check(owner).argument(layer < length_.size(), "layer", "is ", layer,
                                ", but the KvCache has ", length_.size(), " layers");
}

template <class T>
void KvCache<T>::check_append(const char* owner, std::size_t layer,
                              std::size_t new_positions) const {
  check_layer(owner, layer);
  const std::size_t length = detail::checked_add(
      owner, "the cached positions and argument 'new_positions'", length_[layer], new_positions);
  detail::Check(owner).value(length <= capacity_, "the KvCache holds ", length_[layer],
                             " positions in layer ", layer, "; ", new_positions,
                             " more exceed its capacity ", capacity_);
}

template <class T>
void KvCache<T>::append(std::size_t layer, const xt::xarray<T>& k, const xt::xarray<T>& v) {
  const detail::Check check("KvCache::append");
  check_layer(check.function(), layer);
  for (const auto& [name, a] : {std::pair<const char*, const xt::xarray<T>*>{"k", &k}, {"v", &v}})
    check.shape(a->dimension() == 4 && a->shape()[0] == batch_ && a->shape()[1] == n_kv_heads_ &&
                    a->shape()[3] == head_dim_,
                name, a->shape(), "[", batch_, ", ", n_kv_heads_, ", T, ", head_dim_, "]");
  check.shape(k.shape() == v.shape(), "v", v.shape(), k.shape(), " (k's)");
  check_append(check.function(), layer, k.shape()[2]);
  store(layer, k, v);
}

template <class T>
void KvCache<T>::store(std::size_t layer, const xt::xarray<T>& k, const xt::xarray<T>& v) {
  const std::size_t t_new = k.shape()[2];
  const std::size_t start = length_[layer];
  for (std::size_t b = 0; b < batch_; ++b)
    for (std::size_t h = 0; h < n_kv_heads_; ++h) {
      const std::size_t src = (b * n_kv_heads_ + h) * t_new * head_dim_;
      const std::size_t dst = ((b * n_kv_heads_ + h) * capacity_ + start) * head_dim_;
      std::copy_n(k.data() + src, t_new * head_dim_, k_[layer].data() + dst);
      std::copy_n(v.data() + src, t_new * head_dim_, v_[layer].data() + dst);
    }
  length_[layer] += t_new;
}

template <class T>
xt::xarray<T> KvCache<T>::filled(const xt::xarray<T>& store, std::size_t layer) const {
  const std::size_t n = length_[layer];
  xt::xarray<T> out = xt::empty<T>(std::vector<std::size_t>{batch_, n_kv_heads_, n, head_dim_});
  for (std::size_t bh = 0; bh < batch_ * n_kv_heads_; ++bh)
    std::copy_n(store.data() + bh * capacity_ * head_dim_, n * head_dim_,
                out.data() + bh * n * head_dim_);
  return out;
}

template <class T>
KeyValueRows<T> KvCache<T>::rows(std::size_t layer) const {
  KeyValueRows<T> out;
  out.k = k_[layer].data();
  out.v = v_[layer].data();
  out.batch = batch_;
  out.kv_heads = n_kv_heads_;
  out.length = length_[layer];
  out.head_dim = head_dim_;
  out.head_stride = capacity_ * head_dim_;
  out.batch_stride = n_kv_heads_ * out.head_stride;
  return out;
}

template <class T>
xt::xarray<T> KvCache<T>::keys(std::size_t layer) const {
  check_layer("KvCache::keys", layer);
  return filled(k_[layer], layer);
}

template <class T>
xt::xarray<T> KvCache<T>::values(std::size_t layer) const {
  check_layer("KvCache::values", layer);
  return filled(v_[layer], layer);
}

template <class T>
std::size_t KvCache<T>::length(std::size_t layer) const {
  check_layer("KvCache::length", layer);
  return length_[layer];
}

template <class T>
void KvCache<T>::set_start(std::size_t row, std::size_t position) {
  const detail::Check check("KvCache::set_start");
  check.argument(row < batch_, "row", "is ", row, ", but the KvCache holds batch ", batch_);
  check.argument(position < capacity_, "position", "is ", position,
                 ", expected a position below the capacity ", capacity_);
  start_[row] = position;
}

template <class T>
std::size_t KvCache<T>::start(std::size_t row) const {
  detail::Check("KvCache::start")
      .argument(row < batch_, "row", "is ", row, ", but the KvCache holds batch ", batch_);
  return start_[row];
}

template <class T>
bool KvCache<T>::padded() const {
  return std::any_of(start_.begin(), start_.end(), [](std::size_t s) { return s != 0; });
}

template <class T>
xt::xarray<bool> KvCache<T>::padded_causal_mask(std::size_t layer,
                                                std::size_t new_positions) const {
  check_layer("KvCache::padded_causal_mask", layer);
  const std::size_t past = length_[layer], keys = past + new_positions;
  xt::xarray<bool> mask = xt::empty<bool>(std::vector<std::size_t>{batch_, 1, new_positions, keys});
  bool* m = mask.data();
  for (std::size_t b = 0; b < batch_; ++b)
    for (std::size_t i = 0; i < new_positions; ++i)
      for (std::size_t j = 0; j < keys; ++j) *m++ = start_[b] <= j && j <= past + i;
  return mask;
}

template <class T>
void KvCache<T>::clear() {
  std::fill(length_.begin(), length_.end(), std::size_t(0));
  std::fill(start_.begin(), start_.end(), std::size_t(0));
}

template <class T>
void KvCache<T>::keep_rows(const std::vector<std::size_t>& rows) {
  const detail::Check check("KvCache::keep_rows");
  check.argument(!rows.empty(), "rows", "is empty, expected at least one row");
  for (std::size_t i = 0; i < rows.size(); ++i)
    check.argument(rows[i] < batch_ && (i == 0 || rows[i - 1] < rows[i]), "rows", "holds ", rows[i],
                   " at index ", i, ", expected strictly increasing rows below the batch ", batch_);
  // Row rows[i] moves down to row i <= rows[i]: in increasing order no
  // block is overwritten before it has moved.
  const std::size_t block = capacity_ * head_dim_;  // one (row, head) of a layer
  for (std::size_t i = 0; i < rows.size(); ++i) {
    start_[i] = start_[rows[i]];
    if (rows[i] == i) continue;
    for (std::size_t l = 0; l < length_.size(); ++l)
      for (std::size_t h = 0; h < n_kv_heads_; ++h) {
        const std::size_t src = (rows[i] * n_kv_heads_ + h) * block;
        const std::size_t dst = (i * n_kv_heads_ + h) * block;
        const std::size_t filled = length_[l] * head_dim_;
        std::copy_n(k_[l].data() + src, filled, k_[l].data() + dst);
        std::copy_n(v_[l].data() + src, filled, v_[l].data() + dst);
      }
  }
  batch_ = rows.size();
  start_.resize(batch_);
}

template class KvCache<float>;
template class KvCache<double>;

}  // namespace xtgrad
