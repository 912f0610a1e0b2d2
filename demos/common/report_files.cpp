// The helpers of report_files.hpp.

#include "report_files.hpp"

#include <cstdio>
#include <cstdlib>
#include <sstream>

#include <xtgrad/training/run_state.hpp>

namespace demos {

namespace {

namespace fs = std::filesystem;

// A string as a POSIX shell single-quoted word.
std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (const char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

std::string gp_quote(const std::string& s) {
  std::string out = "'";
  for (const char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

void write_summary_json(const fs::path& file, const nlohmann::json& summary) {
  xtgrad::training::write_text_file(file, summary.dump(2) + "\n");
}

bool have_gnuplot() {
  return std::system("command -v gnuplot >/dev/null 2>&1") == 0;
}

PlotResult run_gnuplot(const fs::path& script, const fs::path& out) {
  const std::string command = "gnuplot " + shell_quote(script.string()) + " > " +
                              shell_quote((out / "gnuplot.log").string()) + " 2>&1";
  return std::system(command.c_str()) == 0 ? PlotResult::written : PlotResult::failed;
}

PlotResult plot(const fs::path& out, const std::string& name,
                const std::function<void(std::ostream&)>& write) {
  if (!have_gnuplot()) return PlotResult::no_gnuplot;
  std::ostringstream gp;
  write(gp);
  xtgrad::training::write_text_file(out / name, gp.str());
  return run_gnuplot(out / name, out);
}

std::string line_chart(const std::string& xlabel) {
  return "set terminal pngcairo size 900,560 enhanced font 'Sans,11'\n"
         "set datafile separator ','\nset grid\nset key top right\nset xlabel " +
         gp_quote(xlabel) + "\n";
}

int print_wrote(const fs::path& out, const std::string& files, PlotResult plotted,
                const std::string& pictures, const std::string& noun) {
  const std::string note =
      plotted == PlotResult::written ? ", " + pictures
      : plotted == PlotResult::no_gnuplot
          ? " (no " + noun + ": gnuplot is not installed; apt-get install gnuplot-nox)"
          : " (gnuplot failed: no " + noun + "; see gnuplot.log)";
  std::printf("wrote %s: %s%s\n", out.string().c_str(), files.c_str(), note.c_str());
  return plotted == PlotResult::failed ? 1 : 0;
}

}  // namespace demos
