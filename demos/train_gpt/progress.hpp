#pragma once
// The progress line of a train_gpt run: steps done of the run, the mean
// training loss since the last line, tokens per second and the time left.
// On a terminal it is redrawn in place (carriage return) at most every
// 0.1 s; otherwise (a pipe, a log file) a plain line is printed at every
// tenth of the steps this call trains. Other output (evaluations, samples)
// goes through line(), which ends the bar first.

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <string>

namespace gpt_demo {

class Progress {
 public:
  // Steps first_step + 1 .. last_step are trained; the run has `total_steps`.
  Progress(std::size_t first_step, std::size_t last_step, std::size_t total_steps, std::FILE* out);
  // After step `step` (1-based, global) of `tokens` tokens with loss `loss`.
  void update(std::size_t step, std::size_t tokens, double loss);
  // Prints `text` (ending in a line break) on its own lines.
  void line(const std::string& text);
  // Ends the bar's line (terminal).
  void finish();
  // The time from the last update to now (an evaluation, a save) is not training time.
  void skip_time() { mark_ = std::chrono::steady_clock::now(); }
  // Tokens per second of the training steps so far (time in line() excluded).
  double tokens_per_second() const;
  double train_seconds() const { return seconds_; }

 private:
  void print(std::size_t step);

  std::size_t first_, last_, total_;
  std::FILE* out_;
  bool terminal_, drawn_ = false;
  std::chrono::steady_clock::time_point mark_, last_draw_;
  double seconds_ = 0.0;  // training time, evaluations excluded
  std::size_t tokens_ = 0, next_plain_ = 1;
  double loss_sum_ = 0.0;
  std::size_t losses_ = 0;
};

}  // namespace gpt_demo
