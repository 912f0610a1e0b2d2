#pragma once
// What a train_gpt run leaves in its output directory:
//   summary.json   options, corpus sizes, parameter count, the final losses,
//                  the unigram baseline, tokens per second, times
//   history.csv    one row per evaluation: step, train loss, validation loss, lr, seconds
//   samples.txt    the text generated at each evaluation
//   loss.png       the train and validation loss curves with the unigram baseline
//                  (gnuplot, from plots.gp; its messages in gnuplot.log)
// The picture needs gnuplot (with its pngcairo terminal, as gnuplot-nox has):
// when it is not installed, the run says so and writes the rest.

#include <filesystem>
#include <vector>

#include <nlohmann/json.hpp>

#include "../common/report_files.hpp"
#include "train.hpp"

namespace gpt_demo {

using demos::PlotResult;
using demos::write_summary_json;  // demos/common/report_files.hpp

// Renders loss.png into `out` from history.csv there.
PlotResult plot_losses(const std::filesystem::path& out, double unigram_baseline);

}  // namespace gpt_demo
