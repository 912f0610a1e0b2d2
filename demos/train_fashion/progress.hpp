#pragma once
// The progress line of one training epoch: steps done, the running loss,
// images per second and the time left. On a terminal it is redrawn in place
// (carriage return) at most every 0.1 s; otherwise (a pipe, a log file) a
// plain line is printed at every tenth of the epoch.

#include <chrono>
#include <cstddef>
#include <cstdio>

namespace fashion {

class Progress {
 public:
  Progress(std::size_t epoch, std::size_t epochs, std::size_t steps, std::FILE* out);
  // After step `step` (1-based) of `images` images with mean loss `loss`.
  void update(std::size_t step, std::size_t images, double loss);
  // Ends the line (terminal) after the last update.
  void finish();

 private:
  void print(std::size_t step, bool final);

  std::size_t epoch_, epochs_, steps_;
  std::FILE* out_;
  bool terminal_;
  std::chrono::steady_clock::time_point start_, last_draw_;
  std::size_t images_ = 0, next_plain_ = 1;
  double loss_sum_ = 0.0;
  std::size_t losses_ = 0;
};

}  // namespace fashion
