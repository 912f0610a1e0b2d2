#pragma once
// What the training demos share in writing their output directories:
// summary.json and the gnuplot run that renders their pictures (each file
// written whole or refused: training::write_text_file). A picture needs gnuplot (with
// its pngcairo terminal, as gnuplot-nox has): without it a run says so and
// writes the rest.

#include <filesystem>
#include <functional>
#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

namespace demos {

// A string as a gnuplot single-quoted literal.
std::string gp_quote(const std::string& s);

// `summary` as indented JSON.
void write_summary_json(const std::filesystem::path& file, const nlohmann::json& summary);

enum class PlotResult { written, no_gnuplot, failed };

bool have_gnuplot();
// Runs gnuplot on `script`, its messages (warnings such as an empty axis
// range of a short run) into `out`/gnuplot.log.
PlotResult run_gnuplot(const std::filesystem::path& script, const std::filesystem::path& out);
// The gnuplot program `write` writes, saved as `out`/<name> and run
// (run_gnuplot); no_gnuplot, before anything is written, without gnuplot.
PlotResult plot(const std::filesystem::path& out, const std::string& name,
                const std::function<void(std::ostream&)>& write);
// The settings of a line chart of CSV columns against `xlabel`: a 900 x 560
// PNG, a grid, the key at the top right.
std::string line_chart(const std::string& xlabel);

// Prints "wrote <out>: <files>" and then ", <pictures>" or why there are
// none ("(no <noun>: gnuplot is not installed; ...)", "(gnuplot failed: no
// <noun>; see gnuplot.log)"). The exit code: 1 when gnuplot failed, else 0.
int print_wrote(const std::filesystem::path& out, const std::string& files, PlotResult plotted,
                const std::string& pictures, const std::string& noun);

}  // namespace demos
