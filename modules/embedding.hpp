#pragma once
// Embedding<T>(num_embeddings V, embedding_dim D, padding_idx = none):
// torch.nn.Embedding(V, D, padding_idx), a lookup table of V rows of size D
// (ops/embedding.hpp). Parameter: "weight" [V, D], initialized N(0, 1) as
// torch, with the padding_idx row (if any) set to zero; that row gets no
// gradient. padding_idx in [-V, V), a negative one counting from the end.
//
// The input is int64 indices (engine/indices.hpp), not a Var, so forward
// takes the tape to record on: forward(tape, indices) -> [indices..., D].
// Every index is checked to be in [0, V) before anything is recorded.

#include <cstddef>
#include <cstdint>
#include <optional>

#include "../engine/indices.hpp"
#include "../engine/ops/embedding.hpp"
#include "init.hpp"
#include "module.hpp"

namespace xtgrad {

template <class T>
class Embedding : public Module<T> {
 public:
  Embedding(std::size_t num_embeddings, std::size_t embedding_dim,
            std::optional<std::int64_t> padding_idx = std::nullopt);
  Embedding(std::size_t num_embeddings, std::size_t embedding_dim,
            std::optional<std::int64_t> padding_idx, Generator& generator);

  Var<T> operator()(Tape<T>& tape, const Indices& indices) { return forward(tape, indices); }
  Var<T> forward(Tape<T>& tape, const Indices& indices);
  ModuleConfig config() const override;
  // (A Var input is not an index tensor: these throw std::logic_error.)
  using Module<T>::operator();
  using Module<T>::forward;

  // forward on a private tape that does not record; see Module::infer.
  xt::xarray<T> infer(const Indices& indices) const;

  std::size_t num_embeddings() const { return weight.value.shape()[0]; }
  std::size_t embedding_dim() const { return weight.value.shape()[1]; }
  // padding_idx as given, normalized to [0, V).
  std::optional<std::int64_t> padding_idx() const { return padding_idx_; }

  Parameter<T> weight;  // [V, D]

 protected:
  void collect_parameters(const std::string& prefix,
                          typename Module<T>::NamedParameters& out) override;

 private:
  std::optional<std::int64_t> padding_idx_;
};

extern template class Embedding<float>;
extern template class Embedding<double>;

}  // namespace xtgrad
