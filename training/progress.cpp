// The progress bar of progress.hpp.

#include "progress.hpp"

#include <unistd.h>

#include <utility>

namespace xtgrad::training {

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t k_bar_width = 24;
constexpr double k_redraw_seconds = 0.1;
constexpr double k_small_loss = 1e-2;  // a regression's MSE: 1.234e-05, not 0.0000

std::string clock_text(double seconds) {
  const auto s = static_cast<long>(seconds + 0.5);
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%ld:%02ld", s / 60, s % 60);
  return buffer;
}

}  // namespace

Progress::Progress(std::size_t first_step, std::size_t last_step, std::size_t total_steps,
                   std::FILE* out, std::string unit, std::string label, LossMean mean)
    : first_(first_step),
      last_(last_step),
      total_(total_steps),
      out_(out),
      unit_(std::move(unit)),
      label_(std::move(label)),
      mean_(mean),
      terminal_(::isatty(::fileno(out)) == 1),
      mark_(Clock::now()),
      last_draw_(mark_) {}

void Progress::update(std::size_t step, std::size_t items, double loss) {
  const auto now = Clock::now();
  seconds_ += std::chrono::duration<double>(now - mark_).count();
  mark_ = now;
  items_ += items;
  loss_sum_ += loss;
  ++losses_;
  const std::size_t done = step - first_, steps = last_ - first_;
  if (terminal_) {
    if (step == last_ ||
        std::chrono::duration<double>(now - last_draw_).count() > k_redraw_seconds) {
      last_draw_ = now;
      print(step);
    }
  } else if (done * 10 >= next_plain_ * steps) {
    while (done * 10 >= next_plain_ * steps) ++next_plain_;
    print(step);
  }
}

double Progress::items_per_second() const {
  return seconds_ > 0 ? static_cast<double>(items_) / seconds_ : 0.0;
}

void Progress::print(std::size_t step) {
  const std::size_t done = step - first_;
  const double eta = done > 0 ? seconds_ * static_cast<double>(last_ - step) / done : 0.0;
  const std::size_t filled = total_ ? k_bar_width * step / total_ : k_bar_width;
  std::string bar(filled, '#');
  bar.resize(k_bar_width, '.');
  const std::string count = std::to_string(step) + "/" + std::to_string(total_);
  const std::string head = label_.empty() ? "step " + count + " [" + bar + "]"
                                          : label_ + " [" + bar + "] " + count + " ";
  const double loss = losses_ ? loss_sum_ / losses_ : 0.0;
  char loss_text[32];  // four decimals; three significant digits below k_small_loss
  std::snprintf(loss_text, sizeof loss_text, loss > 0 && loss < k_small_loss ? "%.3e" : "%.4f",
                loss);
  std::fprintf(out_, "%s%s loss %s  %.0f %s  ETA %s%s", terminal_ ? "\r" : "", head.c_str(),
               loss_text, items_per_second(), unit_.c_str(), clock_text(eta).c_str(),
               terminal_ ? (step == last_ ? "" : "   ") : "\n");
  std::fflush(out_);
  drawn_ = terminal_;
  if (mean_ == LossMean::run) return;
  loss_sum_ = 0.0;
  losses_ = 0;
}

void Progress::line(const std::string& text) {
  finish();
  std::fputs(text.c_str(), out_);
  std::fflush(out_);
}

void Progress::finish() {
  if (drawn_) std::fputc('\n', out_);
  drawn_ = false;
  std::fflush(out_);
}

}  // namespace xtgrad::training
