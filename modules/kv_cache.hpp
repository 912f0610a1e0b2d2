#pragma once
// KvCache<T>(batch, n_layers, n_kv_heads, head_dim, capacity): the keys and
// values of the positions already seen, per attention layer, for
// autoregressive decoding (Hugging Face's past_key_values). Layer l holds
//   K_l, V_l [batch, n_kv_heads, capacity, head_dim],
// of which the first length(l) positions are filled; all memory is allocated
// at construction. CausalSelfAttention::forward(x, cache, layer) reads
// length(layer) as the position of x's first row, appends x's keys and
// values, and attends over positions [0, length(layer)).
//
// Left padding, for a batch of sequences of different lengths: set_start(b,
// s) marks row b's positions before s as padding. Attention never reads a
// padded key (CausalSelfAttention masks key j of row b unless start(b) <= j),
// and GPT's learned positions count from start(b) (position j - start(b));
// rotary angles stay those of the cache position j, which shifts q and k of a
// row alike and leaves their scores as without padding (rounding aside).
// clear() sets every start back to 0.
//
// Appending past capacity, to a layer that does not exist, or keys of the
// wrong shape throws std::invalid_argument and changes nothing. So does a
// construction whose keys and values exceed the machine's memory
// (engine/checked_size.hpp); an allocation below that bound that fails
// throws OutOfMemoryError.

#include <cstddef>
#include <vector>

#include <xtensor/xarray.hpp>

namespace xtgrad {

template <class T>
class CausalSelfAttention;
template <class T>
struct KeyValueRows;  // engine/ops/attention.hpp

template <class T>
class KvCache {
 public:
  KvCache(std::size_t batch, std::size_t n_layers, std::size_t n_kv_heads, std::size_t head_dim,
          std::size_t capacity);

  // Throws (naming `owner`) unless `new_positions` more positions fit in
  // layer `layer`: the check append makes, for callers that must check before
  // they change anything else.
  void check_append(const char* owner, std::size_t layer, std::size_t new_positions) const;
  // k, v [batch, n_kv_heads, T_new, head_dim] stored at positions
  // length(layer) .. length(layer) + T_new - 1.
  void append(std::size_t layer, const xt::xarray<T>& k, const xt::xarray<T>& v);
  // Copies of the filled part: [batch, n_kv_heads, length(layer), head_dim].
  xt::xarray<T> keys(std::size_t layer) const;
  xt::xarray<T> values(std::size_t layer) const;

  std::size_t length(std::size_t layer) const;

  // Row `row`'s first position that is not padding (see above); 0 by default.
  void set_start(std::size_t row, std::size_t position);
  std::size_t start(std::size_t row) const;
  bool padded() const;  // some row starts after position 0
  // Which keys row b's queries may read when `new_positions` rows follow the
  // length(layer) cached ones: [batch, 1, new_positions, length + new_positions],
  // true iff start(b) <= j <= length + i (the causal mask of padded rows).
  xt::xarray<bool> padded_causal_mask(std::size_t layer, std::size_t new_positions) const;

  // Every layer back to length 0 and every start to 0 (the memory is kept).
  void clear();
  // Keeps only the rows `rows` (strictly increasing, each < batch()), as rows
  // 0 .. rows.size() - 1 in that order, with their keys, values and starts:
  // a batch whose finished sequences leave it. The memory is kept.
  // std::invalid_argument (nothing changes) for no rows, a row out of range
  // or rows not strictly increasing.
  void keep_rows(const std::vector<std::size_t>& rows);

  std::size_t batch() const { return batch_; }
  std::size_t n_layers() const { return length_.size(); }
  std::size_t n_kv_heads() const { return n_kv_heads_; }
  std::size_t head_dim() const { return head_dim_; }
  std::size_t capacity() const { return capacity_; }

 private:
  // CausalSelfAttention checks the cache at its entry (check_append and the
  // cache's sizes) and appends keys it shaped itself through store.
  friend class CausalSelfAttention<T>;
  void check_layer(const char* owner, std::size_t layer) const;
  // append without its checks: layer, shapes and capacity already checked.
  void store(std::size_t layer, const xt::xarray<T>& k, const xt::xarray<T>& v);
  // Layer `layer`'s filled keys and values where they are, for attention to
  // read without a copy; valid until the cache next changes.
  KeyValueRows<T> rows(std::size_t layer) const;
  xt::xarray<T> filled(const xt::xarray<T>& store, std::size_t layer) const;

  std::size_t batch_, n_kv_heads_, head_dim_, capacity_;
  std::vector<xt::xarray<T>> k_, v_;
  std::vector<std::size_t> length_;
  std::vector<std::size_t> start_;  // [batch]
};

extern template class KvCache<float>;
extern template class KvCache<double>;

}  // namespace xtgrad
