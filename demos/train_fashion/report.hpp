#pragma once
// What a train_fashion run leaves in its output directory:
//   summary.json      options, parameter count, final accuracy, times
//   history.csv       one row per epoch
//   confusion.csv     counts, true class (rows) by predicted class (columns)
//   loss.png, accuracy.png, confusion.png, misclassified.png   (gnuplot,
//   from plots.gp and misclassified.dat; its messages in gnuplot.log)
// The pictures need gnuplot (with its pngcairo terminal, as gnuplot-nox has):
// when it is not installed, the run says so and writes the rest.

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../common/report_files.hpp"
#include "data.hpp"
#include "train.hpp"

namespace fashion {

// counts[t][p]: test images of class t predicted as p.
using Confusion = std::vector<std::vector<std::size_t>>;
Confusion confusion_matrix(const Split& test, const std::vector<std::size_t>& predictions);

void write_confusion_csv(const std::filesystem::path& file, const Confusion& confusion);
using demos::PlotResult;
using demos::write_summary_json;  // demos/common/report_files.hpp

// Renders the four pictures into `out` from history.csv and confusion.csv
// there, and from the first `max_images` misclassified test images.
PlotResult plot_all(const std::filesystem::path& out, const Split& test,
                    const std::vector<std::size_t>& predictions, std::size_t max_images = 32);

}  // namespace fashion
