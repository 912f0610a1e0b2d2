// The fine-tuning run of the demo (finetune.hpp).
#include "finetune.hpp"

#include <cmath>
#include <cstdio>
#include <stdexcept>

#include <nlohmann/json.hpp>
#include <xtgrad/data/token_windows.hpp>
#include <xtgrad/engine/engine.hpp>
#include <xtgrad/modules/lora.hpp>
#include <xtgrad/modules/parameter_count.hpp>
#include <xtgrad/modules/pretrained/hf_llama.hpp>
#include <xtgrad/optim/optim.hpp>
#include <xtgrad/training/progress.hpp>
#include <xtgrad/training/run_state.hpp>

#include "../common/report_files.hpp"

namespace fs = std::filesystem;
using xtgrad::Indices;
using Model = xtgrad::LlamaForCausalLM<float>;

namespace finetune {

namespace {

struct Record {
  std::size_t step = 0;
  double loss = 0.0;
};

// B windows of T + 1 tokens of `ids` from offsets drawn by `rng` in [lo, hi - T - 1].
xtgrad::TokenWindows windows(const std::vector<std::int64_t>& ids, std::size_t lo, std::size_t hi,
                             std::size_t batch, std::size_t t, xtgrad::Generator& rng) {
  std::vector<std::size_t> starts(batch);
  for (std::size_t& start : starts) start = lo + std::size_t(rng() % (hi - lo - t));
  return xtgrad::next_token_windows(ids.data(), ids.size(), starts, t);
}

// The mean cross-entropy of `model` on `count` fixed windows of the held-out tail.
double held_out_loss(Model& model, const std::vector<std::int64_t>& ids, std::size_t split,
                     const Options& o) {
  xtgrad::Generator rng(o.seed + 1);  // the same windows before and after
  const auto [x, y] = windows(ids, split, ids.size(), o.eval_windows, o.block_size, rng);
  xtgrad::Tape<float> tape;
  tape.set_grad_enabled(false);
  return double(xtgrad::next_token_loss(tape.leaf(model.infer(x), false), y).value()());
}

// The prompts continued (one batch), each as text.
std::vector<std::string> continue_prompts(const Model& model, const Tokenizer& tok,
                                          const Options& o) {
  std::vector<std::vector<std::int64_t>> prompts;
  for (const std::string& p : o.prompts) prompts.push_back(tok.encode(p));
  xtgrad::GenerationOptions g;
  g.max_new_tokens = o.max_new_tokens;
  g.temperature = o.temperature;
  if (o.top_k > 0) g.top_k = o.top_k;
  g.top_p = o.top_p;
  g.seed = o.seed;
  std::vector<std::string> out;
  for (const std::vector<std::int64_t>& ids : model.generate(prompts, g))
    out.push_back(tok.decode(ids));
  return out;
}

void print_samples(std::FILE* f, const char* title, const std::vector<std::string>& samples) {
  std::fprintf(f, "---- %s\n", title);
  for (const std::string& s : samples) std::fprintf(f, "%s\n~~~~\n", s.c_str());
}

demos::PlotResult plot_loss(const fs::path& out, double before, double after) {
  return demos::plot(out, "loss.gp", [&](std::ostream& gp) {
    const std::string history = demos::gp_quote((out / "history.csv").string());
    gp << demos::line_chart("step") << "set output " << demos::gp_quote((out / "loss.png").string())
       << "\n"
       << "set title 'LoRA fine-tuning: cross-entropy (nats per token)'\nset ylabel 'loss'\n"
       << "plot " << history << " using 1:2 with lines lw 2 lc rgb '#1f77b4' title 'train', \\\n"
       << "     " << before << " with lines dt 2 lc rgb '#7f7f7f' title 'held out, before', \\\n"
       << "     " << after << " with lines dt 2 lc rgb '#d62728' title 'held out, after'\n";
  });
}

}  // namespace

int run(const Options& o) {
  const fs::path out(o.out), dir = model_directory(o);
  fs::create_directories(out);
  Model model = xtgrad::load_llama<float>(dir, {std::max(o.block_size, o.max_new_tokens)});
  const Tokenizer tok = Tokenizer::for_model(dir);
  if (tok.vocab_size() > model.llama_config().vocab_size)
    throw std::invalid_argument("the tokenizer has " + std::to_string(tok.vocab_size()) +
                                " tokens, the model's vocabulary " +
                                std::to_string(model.llama_config().vocab_size));
  const std::vector<std::int64_t> ids = tok.encode(read_text(o.text));
  const std::size_t split = ids.size() - ids.size() / 10;  // the last tenth is held out
  if (ids.size() / 10 < o.block_size + 2)
    throw std::invalid_argument("the text has " + std::to_string(ids.size()) +
                                " tokens: too few for windows of --block-size " +
                                std::to_string(o.block_size));
  std::printf("finetune: model %s; tokenizer: %s; %zu tokens of text (the last tenth held out)\n",
              dir.string().c_str(), tok.describe().c_str(), ids.size());
  const std::vector<std::string> before = continue_prompts(model, tok, o);
  const double loss_before = held_out_loss(model, ids, split, o);

  xtgrad::Generator generator(o.seed);
  const std::vector<std::string> layers =
      xtgrad::apply_lora(model, o.targets, {o.rank, o.alpha, o.lora_dropout}, generator);
  const std::size_t total = xtgrad::parameter_count(model);
  const std::size_t trainable = xtgrad::parameter_count(model, /*trainable_only=*/true);
  std::printf("finetune: LoRA r=%zu alpha=%g on %zu layers: %zu of %zu parameters trainable\n",
              o.rank, o.alpha, layers.size(), trainable, total);
  xtgrad::optim::AdamW<float> optimizer(model.parameters(), xtgrad::optim::AdamWOptions(o.lr));
  xtgrad::training::Progress progress(0, o.steps, o.steps, stdout, "tok/s");
  std::vector<Record> history;
  xtgrad::Tape<float> tape;
  model.train();
  for (std::size_t step = 1; step <= o.steps; ++step) {
    const auto [x, y] = windows(ids, 0, split, o.batch_size, o.block_size, generator);
    const auto loss = xtgrad::next_token_loss(model.forward(tape, x), y);
    tape.backward(loss);
    optimizer.step();
    optimizer.zero_grad();
    history.push_back({step, double(loss.value()())});
    tape.clear();
    progress.update(step, o.batch_size * o.block_size, history.back().loss);
  }
  progress.finish();
  model.eval();
  const double loss_after = held_out_loss(model, ids, split, o);
  xtgrad::save_lora_adapter(model, out / "adapter");
  const std::vector<std::string> after = continue_prompts(model, tok, o);

  std::printf("held-out loss %.4f -> %.4f nats per token (uniform guess %.4f)\n", loss_before,
              loss_after, std::log(double(model.llama_config().vocab_size)));
  print_samples(stdout, "before", before);
  print_samples(stdout, "after", after);
  std::FILE* samples = std::fopen((out / "samples.txt").string().c_str(), "w");
  if (samples == nullptr) throw std::runtime_error("cannot write '" + out.string() + "'");
  print_samples(samples, "before", before);
  print_samples(samples, "after", after);
  std::fclose(samples);
  xtgrad::training::write_history_csv(out / "history.csv", history,
                                      xtgrad::training::HistoryFields<Record>{
                                          {{"step", &Record::step}}, {{"loss", &Record::loss}}});
  demos::write_summary_json(out / "summary.json",
                            {{"model", dir.string()},
                             {"tokenizer", tok.describe()},
                             {"lora", {{"r", o.rank}, {"alpha", o.alpha}, {"layers", layers}}},
                             {"parameters", total},
                             {"trainable_parameters", trainable},
                             {"steps", o.steps},
                             {"held_out_loss_before", loss_before},
                             {"held_out_loss_after", loss_after},
                             {"tokens_per_second", progress.items_per_second()}});
  return demos::print_wrote(out, "adapter/, samples.txt, history.csv, summary.json",
                            plot_loss(out, loss_before, loss_after), "loss.png", "picture");
}

}  // namespace finetune
