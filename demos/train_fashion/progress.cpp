// The in-place progress bar of progress.hpp.

#include "progress.hpp"

#include <unistd.h>

#include <string>

namespace fashion {

namespace {

constexpr std::size_t k_bar_width = 24;
constexpr double k_redraw_seconds = 0.1;

std::string clock_text(double seconds) {
  const auto s = static_cast<long>(seconds + 0.5);
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%ld:%02ld", s / 60, s % 60);
  return buffer;
}

}  // namespace

Progress::Progress(std::size_t epoch, std::size_t epochs, std::size_t steps, std::FILE* out)
    : epoch_(epoch),
      epochs_(epochs),
      steps_(steps),
      out_(out),
      terminal_(::isatty(::fileno(out)) == 1),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

void Progress::update(std::size_t step, std::size_t images, double loss) {
  images_ += images;
  loss_sum_ += loss;
  ++losses_;
  const auto now = std::chrono::steady_clock::now();
  if (terminal_) {
    if (step == steps_ ||
        std::chrono::duration<double>(now - last_draw_).count() > k_redraw_seconds) {
      last_draw_ = now;
      print(step, step == steps_);
    }
  } else if (step * 10 >= next_plain_ * steps_) {
    while (step * 10 >= next_plain_ * steps_) ++next_plain_;
    print(step, true);
  }
}

void Progress::print(std::size_t step, bool final) {
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double rate = seconds > 0 ? images_ / seconds : 0.0;
  const double eta = step > 0 ? seconds * (steps_ - step) / step : 0.0;
  const std::size_t filled = steps_ ? k_bar_width * step / steps_ : k_bar_width;
  std::string bar(filled, '#');
  bar.resize(k_bar_width, '.');
  std::fprintf(out_, "%sepoch %zu/%zu [%s] %zu/%zu  loss %.4f  %.0f img/s  ETA %s%s",
               terminal_ ? "\r" : "", epoch_, epochs_, bar.c_str(), step, steps_,
               losses_ ? loss_sum_ / losses_ : 0.0, rate, clock_text(eta).c_str(),
               terminal_ ? (final ? "" : "   ") : "\n");
  std::fflush(out_);
}

void Progress::finish() {
  if (terminal_) {
    std::fputc('\n', out_);
    std::fflush(out_);
  }
}

}  // namespace fashion
