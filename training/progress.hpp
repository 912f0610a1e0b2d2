#pragma once
// training::Progress: the progress line of a training loop: the step, the
// mean loss since the last line, items (tokens, images) per second and the
// time left. On a terminal it is redrawn in place (carriage return) at most every 0.1 s;
// otherwise (a pipe, a log file) a plain line is printed at every tenth of
// the steps this call trains. Other output (evaluations, samples) goes
// through line(), which ends the bar first.
//
//   step 120/1500 [#.......] loss 2.4011  9120 tok/s  ETA 3:05       (no label)
//   epoch 2/10 [####....] 84/469  loss 0.5120  8000 img/s  ETA 0:06   (label "epoch 2/10")
// The loss shown is the mean since the previous line, or (LossMean::run)
// the running mean of all the steps of this Progress; below 0.01 (a
// regression's MSE) as 1.234e-05.

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <string>

namespace xtgrad::training {

enum class LossMean { since_line, run };

class Progress {
 public:
  // Steps first_step + 1 .. last_step are trained; the bar spans `total_steps`.
  // `unit` names the rate ("tok/s"); a `label` is printed instead of "step
  // s/total", with "s/total" after the bar.
  Progress(std::size_t first_step, std::size_t last_step, std::size_t total_steps, std::FILE* out,
           std::string unit, std::string label = "", LossMean mean = LossMean::since_line);
  // After step `step` (1-based) of `items` items with loss `loss`.
  void update(std::size_t step, std::size_t items, double loss);
  // Prints `text` (ending in a line break) on its own lines.
  void line(const std::string& text);
  // Ends the bar's line (terminal).
  void finish();
  // The time from the last update to now (an evaluation, a save) is not training time.
  void skip_time() { mark_ = std::chrono::steady_clock::now(); }
  // Items per second of the training steps so far (time skipped excluded).
  double items_per_second() const;
  double train_seconds() const { return seconds_; }

 private:
  void print(std::size_t step);

  std::size_t first_, last_, total_;
  std::FILE* out_;
  std::string unit_, label_;
  LossMean mean_;
  bool terminal_, drawn_ = false;
  std::chrono::steady_clock::time_point mark_, last_draw_;
  double seconds_ = 0.0;  // training time, evaluations excluded
  std::size_t items_ = 0, next_plain_ = 1;
  double loss_sum_ = 0.0;
  std::size_t losses_ = 0;
};

}  // namespace xtgrad::training
