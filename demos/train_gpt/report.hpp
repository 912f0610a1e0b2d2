#pragma once
// What a train_gpt run leaves in its output directory:
//   summary.json   options, corpus sizes, parameter count, the final losses,
//                  the unigram baseline, tokens per second, times
//   history.csv    one row per evaluation: step, train loss, validation loss, lr, seconds
//   samples.txt    the text generated at each evaluation
//   loss.png       the train and validation loss curves with the unigram baseline
//                  (gnuplot, from plots.gp; its messages in gnuplot.log)
// and, for a model with sparse layers (--experts):
//   experts.csv    one row per evaluation: step, then layer<l>_expert<e>, the
//                  tokens routed to each expert since the previous row
//   experts.png    each expert's share of its layer's choices over training,
//                  one panel per layer (from experts.gp)
// The picture needs gnuplot (with its pngcairo terminal, as gnuplot-nox has):
// when it is not installed, the run says so and writes the rest.

#include <filesystem>

#include <nlohmann/json.hpp>

#include "../common/report_files.hpp"
#include "train.hpp"

namespace gpt_demo {

using demos::PlotResult;

// Writes the files and pictures above into `out` (its summary.json
// `summary`), then prints the final losses and what it wrote; the exit code
// of demos::print_wrote.
int write_report(const std::filesystem::path& out, const TrainResult& result,
                 const ModelOptions& model, double unigram, double total_seconds,
                 const nlohmann::json& summary);

}  // namespace gpt_demo
