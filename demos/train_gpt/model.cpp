// The GPT configuration and the active parameters (model.hpp).

#include "model.hpp"

#include <stdexcept>
#include <string>

#include <xtgrad/modules/parameter_count.hpp>

namespace gpt_demo {

using namespace xtgrad;

GPTConfig gpt_config(const ModelOptions& o, std::size_t vocab_size) {
  if (o.n_embd % o.n_head != 0)
    throw std::invalid_argument("--n-head " + std::to_string(o.n_head) +
                                " does not divide --n-embd " + std::to_string(o.n_embd) +
                                "; choose a divisor");
  if (o.experts == 1)
    throw std::invalid_argument(
        "--experts 1 is a single dense FFN with a router; choose 0 (dense) or at least 2");
  if (o.experts > 0 && (o.experts_per_token == 0 || o.experts_per_token > o.experts))
    throw std::invalid_argument("--experts-per-token " + std::to_string(o.experts_per_token) +
                                " is not in 1 .. --experts " + std::to_string(o.experts));
  GPTConfig c;
  c.vocab_size = vocab_size;
  c.block_size = o.block_size;
  c.n_layer = o.n_layer;
  c.n_head = o.n_head;
  c.n_embd = o.n_embd;
  c.style = GPTStyle::gpt2;
  c.dropout = o.dropout;
  c.tie_embeddings = true;
  if (o.experts > 0) {
    c.num_experts = o.experts;
    c.num_experts_per_tok = o.experts_per_token;
    if (o.expert_hidden > 0) c.moe_intermediate_size = o.expert_hidden;
    c.router_aux_loss_coef = o.aux_loss_coef;
    c.router_z_loss_coef = 0.0;
  }
  return c;
}

std::size_t active_parameter_count(GPT<float>& model) {
  std::size_t inactive = 0;
  const GPTConfig& c = model.gpt_config();
  for (const TransformerBlock<float>& block : model.h)
    if (const SparseMoe<float>* moe = block.sparse_moe())
      for (std::size_t e = c.num_experts_per_tok; e < moe->experts.size(); ++e)
        inactive += moe->experts[e].gate.weight.value.size() +
                    moe->experts[e].up.weight.value.size() +
                    moe->experts[e].down.weight.value.size();
  return parameter_count(model) - inactive;
}

}  // namespace gpt_demo
