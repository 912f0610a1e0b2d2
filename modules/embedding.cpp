#include "embedding.hpp"

#include <string>
#include <utility>

#include <xtensor/xview.hpp>

#include "../engine/checked_size.hpp"
#include "../engine/errors.hpp"

namespace xtgrad {

template <class T>
Embedding<T>::Embedding(std::size_t num_embeddings, std::size_t embedding_dim,
                        std::optional<std::int64_t> padding_idx)
    : Embedding(num_embeddings, embedding_dim, padding_idx,
                detail::lvalue(Generator(k_default_seed))) {}

template <class T>
Embedding<T>::Embedding(std::size_t num_embeddings, std::size_t embedding_dim,
                        std::optional<std::int64_t> padding_idx, Generator& generator) {
  detail::check_positive_size("Embedding", "num_embeddings", num_embeddings);
  detail::check_positive_size("Embedding", "embedding_dim", embedding_dim);
  detail::checked_allocation<T>("Embedding", "arguments 'num_embeddings' and 'embedding_dim'",
                                {num_embeddings, embedding_dim});
  if (padding_idx) {
    const auto v = static_cast<std::int64_t>(num_embeddings);
    if (*padding_idx < -v || *padding_idx >= v)
      detail::fail_argument("Embedding", "padding_idx",
                            "is " + std::to_string(*padding_idx) + ", expected an index in [" +
                                std::to_string(-v) + ", " + std::to_string(v) + ")");
    padding_idx_ = *padding_idx < 0 ? *padding_idx + v : *padding_idx;
  }
  weight = Parameter<T>("weight",
                        detail::standard_normal<T>({num_embeddings, embedding_dim}, generator));
  if (padding_idx_) {  // torch's reset_parameters zeroes the padding row
    xt::view(weight.value, *padding_idx_, xt::all()) = T(0);
    weight.mark_changed();
  }
}

template <class T>
Var<T> Embedding<T>::forward(Tape<T>& tape, const Indices& indices) {
  // Indices are checked before the weight is recorded: bad indices leave the tape as it was.
  detail::check_indices("embedding", "indices", indices, num_embeddings());
  return embedding(indices, tape.param(weight), padding_idx_);
}

template <class T>
xt::xarray<T> Embedding<T>::infer(const Indices& indices) const {
  const detail::InferenceScope inference;
  Tape<T> tape;
  tape.set_grad_enabled(false);
  // forward only reads the weight when recording is off (see Module::infer).
  const Var<T> y = const_cast<Embedding<T>*>(this)->forward(tape, indices);
  return std::move(tape.value_mut(y.index()));
}

template <class T>
void Embedding<T>::collect_parameters(const std::string& prefix,
                                      typename Module<T>::NamedParameters& out) {
  this->add_parameter(prefix, weight, out);
}

template <class T>
ModuleConfig Embedding<T>::config() const {
  return ModuleConfig("Embedding")
      .add("num_embeddings", num_embeddings())
      .add("embedding_dim", embedding_dim())
      .add("padding_idx", padding_idx_ ? std::to_string(*padding_idx_) : std::string("none"));
}

template class Embedding<float>;
template class Embedding<double>;

}  // namespace xtgrad
