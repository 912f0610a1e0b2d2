// The files and the gnuplot picture of report.hpp.

#include "report.hpp"

#include <cstdio>
#include <sstream>
#include <string>

namespace gpt_demo {

namespace {

namespace fs = std::filesystem;
using demos::gp_quote;

// loss.png from history.csv, the unigram baseline a line.
PlotResult plot_losses(const fs::path& out, double unigram_baseline) {
  return demos::plot(out, "plots.gp", [&](std::ostream& gp) {
    const std::string history = gp_quote((out / "history.csv").string());
    char baseline[64];
    std::snprintf(baseline, sizeof baseline, "%.17g", unigram_baseline);
    gp << demos::line_chart("step") << "set output " << gp_quote((out / "loss.png").string())
       << "\n"
       << "set title 'Character-level GPT on the fortunes: cross-entropy (nats per character)'\n"
       << "set ylabel 'loss'\n"
       << "plot " << history << " using 1:2 with linespoints lw 2 pt 7 lc rgb '#1f77b4' "
       << "title 'train (mean since the previous point)', \\\n     " << history
       << " using 1:3 with linespoints lw 2 pt 5 lc rgb '#d62728' title 'validation', \\\n     "
       << baseline << " with lines lw 2 dt 2 lc rgb '#7f7f7f' title 'unigram baseline'\n";
  });
}

// experts.csv of `records` for `layers` layers of `experts` experts each.
void write_experts_csv(const fs::path& file, const std::vector<ExpertRecord>& records,
                       std::size_t layers, std::size_t experts) {
  std::ostringstream csv;
  csv << "step";
  for (std::size_t l = 0; l < layers; ++l)
    for (std::size_t e = 0; e < experts; ++e) csv << ",layer" << l << "_expert" << e;
  csv << "\n";
  for (const ExpertRecord& r : records) {
    csv << r.step;
    for (const std::size_t tokens : r.tokens) csv << "," << tokens;
    csv << "\n";
  }
  xtgrad::training::write_text_file(file, csv.str());
}

// experts.png from experts.csv: each expert's share of its layer's choices.
PlotResult plot_experts(const fs::path& out, std::size_t layers, std::size_t experts,
                        std::size_t experts_per_token) {
  return demos::plot(out, "experts.gp", [&](std::ostream& gp) {
    const std::string data = gp_quote((out / "experts.csv").string());
    const std::size_t rows = (layers + 1) / 2, columns = layers > 1 ? 2 : 1;
    gp << "set terminal pngcairo size " << 560 * columns << "," << 80 + 320 * rows
       << " enhanced font 'Sans,10'\n"
       << "set datafile separator ','\nset grid\nset key outside right\nset xlabel 'step'\n"
       << "set ylabel 'share of the choices'\nset yrange [0:*]\n"
       << "set output " << gp_quote((out / "experts.png").string()) << "\n"
       << "set multiplot layout " << rows << "," << columns << " title 'Tokens per expert, "
       << experts << " experts, " << experts_per_token
       << " per token (uniform: " << 1.0 / static_cast<double>(experts) << ")'\n";
    for (std::size_t l = 0; l < layers; ++l) {
      // the sum of layer l's columns, 2 + l E .. 1 + (l + 1) E
      std::string total;
      for (std::size_t e = 0; e < experts; ++e)
        total += (e ? "+$" : "$") + std::to_string(2 + l * experts + e);
      gp << "set title 'layer " << l << "'\nplot for [e=0:" << experts - 1 << "] " << data
         << " using 1:(column(" << 2 + l * experts << "+e)/(" << total
         << ")) with linespoints lw 2 pt 7 ps 0.6 title sprintf('expert %d', e)\n";
    }
    gp << "unset multiplot\n";
  });
}

}  // namespace

int write_report(const fs::path& out, const TrainResult& result, const ModelOptions& m,
                 double unigram, double total_seconds, const nlohmann::json& summary) {
  xtgrad::training::write_history_csv(out / "history.csv", result.history, history_fields());
  demos::write_summary_json(out / "summary.json", summary);
  PlotResult plotted = plot_losses(out, unigram);
  const bool sparse = m.experts > 0;
  if (sparse) {
    write_experts_csv(out / "experts.csv", result.experts, m.n_layer, m.experts);
    const PlotResult experts = plot_experts(out, m.n_layer, m.experts, m.experts_per_token);
    if (plotted == PlotResult::written) plotted = experts;
  }
  std::printf(
      "validation loss %.4f nats per character (unigram baseline %.4f) after %zu steps; "
      "%.0f tokens/s, %.1f s in all\n",
      result.final_val_loss, unigram, result.step, result.tokens_per_second, total_seconds);
  return sparse ? demos::print_wrote(out, "summary.json, history.csv, samples.txt, experts.csv",
                                     plotted, "loss.png, experts.png", "pictures")
                : demos::print_wrote(out, "summary.json, history.csv, samples.txt", plotted,
                                     "loss.png", "picture");
}

}  // namespace gpt_demo
