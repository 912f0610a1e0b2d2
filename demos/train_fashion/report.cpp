// The files and gnuplot pictures of report.hpp.

#include "report.hpp"

#include <cstdio>
#include <sstream>

#include <xtgrad/training/run_state.hpp>

#include "zoo/fashion/models.hpp"

namespace fashion {

namespace {

namespace fs = std::filesystem;
using demos::gp_quote;
using xtgrad::training::write_text_file;

constexpr std::size_t k_grid_columns = 8;
constexpr std::size_t k_cell = k_image_side + 8;  // an image and the margin for its label

// "set xtics ('T-shirt/top' 0, ...)" for the class axis `axis`.
std::string class_tics(const char* axis) {
  std::string out = std::string("set ") + axis + "tics (";
  for (std::size_t c = 0; c < k_classes; ++c)
    out += (c ? ", " : "") + gp_quote(k_class_names[c]) + " " + std::to_string(c);
  return out + ")\n";
}

// misclassified.dat: a canvas of the first misclassified images in a grid
// (rows of pixels, each image in a cell with a blank margin), as a gnuplot
// matrix; and the gnuplot labels naming each image's true and predicted class.
std::string write_misclassified(const fs::path& out, const Split& test,
                                const std::vector<std::size_t>& predictions, std::size_t max_images,
                                std::size_t& rows) {
  std::vector<std::size_t> wrong;
  for (std::size_t i = 0; i < predictions.size() && wrong.size() < max_images; ++i)
    if (predictions[i] != static_cast<std::size_t>(test.labels(i))) wrong.push_back(i);
  rows = (wrong.size() + k_grid_columns - 1) / k_grid_columns;
  const std::size_t width = k_grid_columns * k_cell, height = rows * k_cell;
  std::vector<int> canvas(width * height, 0);
  std::string labels;
  for (std::size_t k = 0; k < wrong.size(); ++k) {
    const std::size_t gx = k % k_grid_columns, gy = k / k_grid_columns;
    const std::uint8_t* image = test.raw.data() + wrong[k] * k_pixels;
    for (std::size_t y = 0; y < k_image_side; ++y)
      for (std::size_t x = 0; x < k_image_side; ++x)
        canvas[(gy * k_cell + y) * width + gx * k_cell + x] = image[y * k_image_side + x];
    // A double-quoted gnuplot string, where \n is a line break.
    labels += "set label " + std::to_string(k + 1) +
              " \"true: " + k_class_names[test.labels(wrong[k])] +
              "\\npred: " + k_class_names[predictions[wrong[k]]] + "\" at " +
              std::to_string(gx * k_cell + k_image_side / 2) + "," +
              std::to_string(gy * k_cell + k_image_side + 4) +
              " center front textcolor rgb '#b00000' font 'Sans,7'\n";
  }
  const fs::path file = out / "misclassified.dat";
  std::ostringstream data;
  for (std::size_t y = 0; y < height; ++y)
    for (std::size_t x = 0; x < width; ++x)
      data << canvas[y * width + x] << (x + 1 < width ? ' ' : '\n');
  write_text_file(file, data.str());
  return labels;
}

}  // namespace

Confusion confusion_matrix(const Split& test, const std::vector<std::size_t>& predictions) {
  Confusion counts(k_classes, std::vector<std::size_t>(k_classes, 0));
  for (std::size_t i = 0; i < predictions.size(); ++i)
    ++counts[static_cast<std::size_t>(test.labels(i))][predictions[i]];
  return counts;
}

void write_confusion_csv(const fs::path& file, const Confusion& confusion) {
  std::ostringstream out;
  for (const auto& row : confusion)
    for (std::size_t p = 0; p < row.size(); ++p) out << row[p] << (p + 1 < row.size() ? "," : "\n");
  write_text_file(file, out.str());
}

PlotResult plot_all(const fs::path& out, const Split& test,
                    const std::vector<std::size_t>& predictions, std::size_t max_images) {
  return demos::plot(out, "plots.gp", [&](std::ostream& gp) {
    std::size_t rows = 0;
    const std::string labels = write_misclassified(out, test, predictions, max_images, rows);
    const std::string history = gp_quote((out / "history.csv").string());
    gp << demos::line_chart("epoch") << "set output " << gp_quote((out / "loss.png").string())
       << "\n"
       << "set title 'Fashion-MNIST: cross-entropy'\nset ylabel 'loss'\n"
       << "plot " << history << " using 1:2 with linespoints lw 2 pt 7 lc rgb '#1f77b4' "
       << "title 'train (label-smoothed)', \\\n     " << history
       << " using 1:3 with linespoints lw 2 pt 5 lc rgb '#d62728' title 'test'\n"
       << "set output " << gp_quote((out / "accuracy.png").string()) << "\n"
       << "set title 'Fashion-MNIST: test accuracy'\nset ylabel 'accuracy'\nset key bottom right\n"
       << "plot " << history << " using 1:4 with linespoints lw 2 pt 7 lc rgb '#2ca02c' "
       << "title 'test accuracy'\n";
    // The confusion matrix as a heat map with its counts.
    gp << "reset\nset terminal pngcairo size 900,800 enhanced font 'Sans,10'\n"
       << "set output " << gp_quote((out / "confusion.png").string()) << "\n"
       << "set datafile separator ','\nset title 'Confusion matrix (test set)'\n"
       << "set xlabel 'predicted'\nset ylabel 'true'\nset yrange [9.5:-0.5]\n"
       << "set xrange [-0.5:9.5]\nset xtics rotate by 45 right\n"
       << class_tics("x") << class_tics("y")
       << "set palette defined (0 '#ffffff', 1 '#1f4e9c')\nset logscale cb\nset cbrange [1:*]\n"
       << "unset key\nset size ratio -1\n"
       << "c = " << gp_quote((out / "confusion.csv").string()) << "\n"
       << "plot c matrix using 1:2:($3 < 1 ? 1 : $3) with image, \\\n"
       << "     c matrix using 1:2:(sprintf('%d', $3)) with labels font 'Sans,9'\n";
    if (rows == 0) return;
    // The misclassified images, each with its true and predicted class.
    gp << "reset\nset terminal pngcairo size " << 130 * k_grid_columns << "," << 150 * rows + 60
       << " enhanced font 'Sans,10'\n"
       << "set output " << gp_quote((out / "misclassified.png").string()) << "\n"
       << "set title 'Misclassified test images'\nunset key\nunset colorbox\n"
       << "unset xtics\nunset ytics\nunset border\nset size ratio -1\n"
       << "set palette gray negative\nset cbrange [0:255]\n"
       << "set xrange [-0.5:" << k_grid_columns * k_cell - 0.5 << "]\n"
       << "set yrange [" << rows * k_cell - 0.5 << ":-0.5]\n"
       << labels << "plot " << gp_quote((out / "misclassified.dat").string())
       << " matrix with image\n";
  });
}

}  // namespace fashion
