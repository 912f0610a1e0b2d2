// The files and the gnuplot picture of report.hpp.

#include "report.hpp"

#include <cstdio>
#include <fstream>
#include <string>

namespace gpt_demo {

namespace fs = std::filesystem;
using demos::check_written;
using demos::gp_quote;
using demos::open_for_writing;

PlotResult plot_losses(const fs::path& out, double unigram_baseline) {
  if (!demos::have_gnuplot()) return PlotResult::no_gnuplot;
  const fs::path script = out / "plots.gp";
  std::ofstream gp = open_for_writing(script);
  const std::string history = gp_quote((out / "history.csv").string());
  char baseline[64];
  std::snprintf(baseline, sizeof baseline, "%.17g", unigram_baseline);
  gp << "set terminal pngcairo size 900,560 enhanced font 'Sans,11'\n"
     << "set datafile separator ','\nset grid\nset key top right\nset xlabel 'step'\n"
     << "set output " << gp_quote((out / "loss.png").string()) << "\n"
     << "set title 'Character-level GPT on the fortunes: cross-entropy (nats per character)'\n"
     << "set ylabel 'loss'\n"
     << "plot " << history << " using 1:2 with linespoints lw 2 pt 7 lc rgb '#1f77b4' "
     << "title 'train', \\\n     " << history
     << " using 1:3 with linespoints lw 2 pt 5 lc rgb '#d62728' title 'validation', \\\n     "
     << baseline << " with lines lw 2 dt 2 lc rgb '#7f7f7f' title 'unigram baseline'\n";
  check_written(gp, script);
  return demos::run_gnuplot(script, out);
}

}  // namespace gpt_demo
