// bench_pretrained: what serving and fine-tuning a pretrained-style model
// cost, on a random GPT of LLaMA style (RMSNorm, SwiGLU, grouped-query
// attention, rotary positions, untied head):
//
//   build/release/bench/bench_pretrained [--section generate|lora|all]
//       [--layers 6 --embd 512 --heads 8 --kv-heads 4 --vocab 8192 --threads 1]
//       [--prompts 8 --new-tokens 64 --rounds 5 --stop-tokens 0]
//       [--tokens 128 --steps 5 --rank 8 --targets q_proj,k_proj,v_proj,o_proj]
//
// generate: GPT::generate over --prompts prompts of different lengths (8 ..
//   8 + 3 (P - 1) tokens) in one batch, against P calls of the single-prompt
//   generate; tokens/s of each (new tokens over wall time) and their ratio,
//   medians of --rounds interleaved rounds. With --stop-tokens S, the ids
//   below S stop a row (rows finish at different steps) and each single
//   call is a batch of one seeded as the batch's row.
// lora: each configuration in a process of its own (--child), so that its peak
//   resident memory (VmHWM: the weights included) is its own:
//     forward      inference forward (GPT::infer) of [1, --tokens] tokens
//     no-weight    forward + cross-entropy + backward with every weight frozen
//                  but the embedding table: the gradients of the activations only
//     lora         a LoRA training step: apply_lora on --targets (default
//                  q/k/v/o_proj; the MLP's are gate_proj, up_proj, down_proj)
//                  at rank --rank, forward + cross-entropy + backward + AdamW step
//   Printed: peak RSS, median step time (first step excluded), the bytes of
//   gradient buffers held by frozen parameters after the steps (0 expected),
//   and the ratios lora / forward (memory) and lora / no-weight (time).
#include <chrono>
#include <cstdio>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <xtgrad/engine/engine.hpp>
#include <xtgrad/engine/threads.hpp>
#include <xtgrad/modules/modules.hpp>
#include <xtgrad/optim/optim.hpp>

#include "cases.hpp"  // init_openblas
#include "harness.hpp"
#include "machine.hpp"  // self_executable

using namespace xtgrad;
using namespace xtgrad::bench;
using Clock = std::chrono::steady_clock;

namespace {

struct Config {
  std::string section = "all";
  std::size_t layers = 6, embd = 512, heads = 8, kv_heads = 4, vocab = 8192;
  std::size_t prompts = 8, new_tokens = 64, tokens = 128, steps = 5, rank = 8;
  std::size_t rounds = 5, stop_tokens = 0;
  std::vector<std::string> targets = {"q_proj", "k_proj", "v_proj", "o_proj"};
  int threads = 1;
};

GPTConfig model_config(const Config& c) {
  GPTConfig g;
  g.style = GPTStyle::llama;
  g.vocab_size = c.vocab;
  g.block_size = std::max<std::size_t>(256, c.tokens);
  g.n_layer = c.layers;
  g.n_head = c.heads;
  g.n_kv_head = c.kv_heads;
  g.n_embd = c.embd;
  g.tie_embeddings = false;
  g.hf_mlp = true;
  return g;
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

Indices random_tokens(std::size_t n, std::size_t vocab, std::uint64_t seed) {
  Generator rng(seed);
  Indices t = xt::empty<std::int64_t>(std::vector<std::size_t>{1, n});
  for (auto& id : t) id = std::int64_t(rng() % vocab);
  return t;
}

// New tokens of a generate's output beyond the prompts.
std::size_t new_tokens(const std::vector<std::vector<std::int64_t>>& out,
                       const std::vector<std::vector<std::int64_t>>& prompts) {
  std::size_t n = 0;
  for (std::size_t p = 0; p < out.size(); ++p) n += out[p].size() - prompts[p].size();
  return n;
}

void run_generate(const Config& c) {
  const GPT<float> model(model_config(c));
  std::vector<std::vector<std::int64_t>> prompts;
  for (std::size_t p = 0; p < c.prompts; ++p) {
    const Indices t = random_tokens(8 + 3 * p, c.vocab, p);
    prompts.emplace_back(t.begin(), t.end());
  }
  GenerationOptions o;
  o.max_new_tokens = c.new_tokens;
  o.temperature = 0.8;
  o.top_k = 40;
  for (std::size_t id = 0; id < c.stop_tokens; ++id) o.stop_tokens.push_back(std::int64_t(id));
  // One prompt at a time: the single-prompt generate, or with stop tokens a
  // batch of one seeded as the batch's row (the same draws).
  const auto single_calls = [&] {
    std::vector<std::vector<std::int64_t>> out;
    for (std::size_t p = 0; p < c.prompts; ++p) {
      if (c.stop_tokens == 0) {
        out.push_back(model.generate(prompts[p], c.new_tokens, 0.8, std::size_t(40), p));
        continue;
      }
      GenerationOptions one = o;
      one.seed = o.seed + p * k_row_seed_step;
      out.push_back(model.generate(std::vector<std::vector<std::int64_t>>{prompts[p]}, one)[0]);
    }
    return out;
  };
  model.generate(prompts, o);  // warm-up
  // Interleaved rounds (the order alternating), medians: the machine's load
  // changes between rounds, alike for both within one.
  std::vector<double> single, batched, ratio;
  std::size_t single_tokens = 0, batched_tokens = 0;
  for (std::size_t r = 0; r < c.rounds; ++r) {
    double s = 0.0, b = 0.0;
    for (int part = 0; part < 2; ++part) {
      const Clock::time_point t = Clock::now();
      if ((part == 0) == (r % 2 == 0)) {
        single_tokens = new_tokens(single_calls(), prompts);
        s = seconds_since(t);
      } else {
        batched_tokens = new_tokens(model.generate(prompts, o), prompts);
        b = seconds_since(t);
      }
    }
    single.push_back(s);
    batched.push_back(b);
    ratio.push_back((double(batched_tokens) / b) / (double(single_tokens) / s));
  }
  std::printf("generate: %zu prompts of 8 .. %zu tokens, at most %zu new tokens each", c.prompts,
              8 + 3 * (c.prompts - 1), c.new_tokens);
  if (c.stop_tokens > 0) std::printf(", token ids below %zu stop a row", c.stop_tokens);
  std::printf("; medians of %zu interleaved rounds\n", c.rounds);
  std::printf("  %zu single calls  %8.1f tok/s  (%.3f s, %zu tokens)\n", c.prompts,
              double(single_tokens) / median(single), median(single), single_tokens);
  std::printf("  one batch        %8.1f tok/s  (%.3f s, %zu tokens)\n",
              double(batched_tokens) / median(batched), median(batched), batched_tokens);
  std::printf("  batched / single %8.2fx (median of the rounds' ratios)\n", median(ratio));
}

struct Result {
  double peak_mib = 0.0, step_s = 0.0, frozen_grad_mib = 0.0;
  std::size_t parameters = 0;
};

// One configuration of the lora section (see the top of the file).
Result lora_case(const Config& c, const std::string& kind) {
  GPT<float> model(model_config(c));
  const Indices x = random_tokens(c.tokens, c.vocab, 1);
  Indices y = xt::empty<std::int64_t>(std::vector<std::size_t>{c.tokens});
  std::copy(x.begin() + 1, x.end(), y.begin());
  y(c.tokens - 1) = 0;
  std::optional<optim::AdamW<float>> optimizer;
  if (kind == "lora") {
    apply_lora(model, c.targets, c.rank, 2.0 * double(c.rank));
    optimizer.emplace(model.parameters(), optim::AdamWOptions(1e-3));
  } else if (kind == "no-weight") {
    for (Parameter<float>* p : model.parameters()) p->set_requires_grad(false);
    model.wte.weight.set_requires_grad(true);  // the activations' gradients flow down to it
  }
  std::vector<double> times;
  Tape<float> tape;
  for (std::size_t s = 0; s <= c.steps; ++s) {
    const Clock::time_point t = Clock::now();
    if (kind == "forward") {
      model.infer(x);
    } else {
      const Var<float> logits = model.forward(tape, x);  // [1, T, V]
      tape.backward(cross_entropy(reshape(logits, {-1, std::int64_t(c.vocab)}), y));
      if (optimizer) optimizer->step();
      model.zero_grad();
      tape.clear();
    }
    if (s > 0) times.push_back(seconds_since(t));
  }
  Result r;
  r.step_s = median(times);
  r.peak_mib = double(peak_resident_kib()) / 1024.0;
  for (const Parameter<float>* p : model.parameters()) {
    r.parameters += p->value.size();
    if (!p->requires_grad && p->has_grad)
      r.frozen_grad_mib += double(p->grad.size() * 4) / 1048576.0;
  }
  return r;
}

// One configuration in a process of its own (this program with --child), so
// that its peak resident memory is its own; its result read from its output.
Result in_child(const Config& c, const std::string& kind) {
  std::string command =
      self_executable() + " --child " + kind + " --layers " + std::to_string(c.layers) +
      " --embd " + std::to_string(c.embd) + " --heads " + std::to_string(c.heads) + " --kv-heads " +
      std::to_string(c.kv_heads) + " --vocab " + std::to_string(c.vocab) + " --tokens " +
      std::to_string(c.tokens) + " --steps " + std::to_string(c.steps) + " --rank " +
      std::to_string(c.rank) + " --threads " + std::to_string(c.threads) + " --targets ";
  for (std::size_t i = 0; i < c.targets.size(); ++i) command += (i ? "," : "") + c.targets[i];
  std::FILE* child = popen(command.c_str(), "r");
  if (child == nullptr) throw std::runtime_error("cannot run " + command);
  Result r;
  const int read = std::fscanf(child, "%lf %lf %lf %zu", &r.peak_mib, &r.step_s, &r.frozen_grad_mib,
                               &r.parameters);
  if (pclose(child) != 0 || read != 4) throw std::runtime_error("the child " + kind + " failed");
  return r;
}

// The parent builds no model: a child's peak would start from the parent's resident memory.
void run_lora(const Config& c) {
  std::vector<Result> results;
  for (const char* kind : {"forward", "no-weight", "lora"}) results.push_back(in_child(c, kind));
  const std::size_t n = results[0].parameters;
  std::string targets;
  for (const std::string& t : c.targets) targets += (targets.empty() ? "" : ",") + t;
  std::printf("lora: %zu parameters (%.1f MiB of float), %zu tokens per step, rank %zu on %s\n", n,
              double(n * 4) / 1048576.0, c.tokens, c.rank, targets.c_str());
  std::printf("  %-10s %12s %10s %16s\n", "", "peak MiB", "step s", "frozen grads MiB");
  const char* kinds[] = {"forward", "no-weight", "lora"};
  for (std::size_t i = 0; i < 3; ++i)
    std::printf("  %-10s %12.1f %10.4f %16.1f\n", kinds[i], results[i].peak_mib, results[i].step_s,
                results[i].frozen_grad_mib);
  std::printf("  lora peak / forward peak     %.2f (goal <= 1.3)\n",
              results[2].peak_mib / results[0].peak_mib);
  std::printf("  lora step / no-weight step   %.2f (goal <= 1.2)\n",
              results[2].step_s / results[1].step_s);
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  CLI::App app("bench_pretrained: batched generation and LoRA steps of a LLaMA-style GPT");
  app.add_option("--section", c.section, "generate, lora or all")->capture_default_str();
  app.add_option("--layers", c.layers)->capture_default_str();
  app.add_option("--embd", c.embd)->capture_default_str();
  app.add_option("--heads", c.heads)->capture_default_str();
  app.add_option("--kv-heads", c.kv_heads)->capture_default_str();
  app.add_option("--vocab", c.vocab)->capture_default_str();
  app.add_option("--prompts", c.prompts)->capture_default_str()->check(CLI::Range(1, 1024));
  app.add_option("--new-tokens", c.new_tokens)->capture_default_str();
  app.add_option("--rounds", c.rounds, "generate: interleaved rounds")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app.add_option("--stop-tokens", c.stop_tokens, "generate: the token ids below it stop a row")
      ->capture_default_str();
  app.add_option("--tokens", c.tokens, "lora: tokens per step")->capture_default_str();
  app.add_option("--steps", c.steps)->capture_default_str()->check(CLI::Range(1, 1000));
  app.add_option("--rank", c.rank)->capture_default_str();
  app.add_option("--targets", c.targets, "lora: the adapted layers (PEFT's target_modules)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--threads", c.threads)->capture_default_str()->check(CLI::Range(1, 256));
  std::string child;  // one lora configuration, its result on stdout (in_child)
  app.add_option("--child", child)->group("");
  CLI11_PARSE(app, argc, argv);
  try {
    if (!child.empty()) {
      init_openblas(c.threads);
      set_num_threads(c.threads);
      const Result r = lora_case(c, child);
      std::printf("%.17g %.17g %.17g %zu\n", r.peak_mib, r.step_s, r.frozen_grad_mib, r.parameters);
      return 0;
    }
    const bool lora = c.section == "lora" || c.section == "all";
    const bool generate = c.section == "generate" || c.section == "all";
    if (!lora && !generate)
      throw std::invalid_argument("--section is '" + c.section +
                                  "', expected generate, lora or all");
    if (lora) run_lora(c);
    if (generate) {
      init_openblas(c.threads);
      set_num_threads(c.threads);
      std::printf("bench_pretrained: %s\n", compute_info().c_str());
      run_generate(c);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_pretrained: %s\n", e.what());
    return 1;
  }
  return 0;
}
