// The GPT configuration and AdamW's groups (model.hpp).

#include "model.hpp"

#include <set>
#include <stdexcept>
#include <string>

namespace gpt_demo {

using namespace xtgrad;

GPTConfig gpt_config(const ModelOptions& o, std::size_t vocab_size) {
  if (o.n_embd % o.n_head != 0)
    throw std::invalid_argument("--n-head " + std::to_string(o.n_head) +
                                " does not divide --n-embd " + std::to_string(o.n_embd) +
                                "; choose a divisor");
  GPTConfig c;
  c.vocab_size = vocab_size;
  c.block_size = o.block_size;
  c.n_layer = o.n_layer;
  c.n_head = o.n_head;
  c.n_embd = o.n_embd;
  c.style = GPTStyle::gpt2;
  c.dropout = o.dropout;
  c.tie_embeddings = true;
  return c;
}

namespace {
// Each parameter once, in order (a tied weight may be listed under two names).
std::vector<Parameter<float>*> distinct_parameters(Module<float>& model) {
  std::vector<Parameter<float>*> out;
  std::set<const Parameter<float>*> seen;
  for (Parameter<float>* p : model.parameters())
    if (seen.insert(p).second) out.push_back(p);
  return out;
}
}  // namespace

std::size_t parameter_count(Module<float>& model) {
  std::size_t n = 0;
  for (Parameter<float>* p : distinct_parameters(model)) n += p->value.size();
  return n;
}

std::vector<optim::AdamWParamGroup<float>> decay_groups(Module<float>& model, double lr,
                                                        double weight_decay, double beta2) {
  std::vector<Parameter<float>*> decay, no_decay;
  for (Parameter<float>* p : distinct_parameters(model))
    (p->value.dimension() >= 2 ? decay : no_decay).push_back(p);
  return {{decay, optim::AdamWOptions(lr).betas({0.9, beta2}).weight_decay(weight_decay)},
          {no_decay, optim::AdamWOptions(lr).betas({0.9, beta2}).weight_decay(0.0)}};
}

}  // namespace gpt_demo
