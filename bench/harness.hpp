#pragma once
// The timing harness of bench_xtgrad: warm-up, interleaved repeats, medians.
//
// Contestants of one row (xtgrad, its floor, LibTorch) are timed in rounds,
// one sample of each per round, so that a burst of load from another process
// on this shared machine hits all of them alike and cancels in their ratio
// (paired_ratio: the median of the per-round ratios).
// A sample repeats its contestant `inner` times, chosen after the warm-up so
// that one sample lasts at least TimingOptions::min_sample_seconds (a toy step
// is a few microseconds: timing it one call at a time would measure the clock).

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace xtgrad::bench {

// One iteration of whatever is measured; it owns its state (buffers, model, tape).
using Runner = std::function<void()>;

struct Contestant {
  std::string name;  // "xtgrad", "floor", "libtorch", ...
  Runner run;
  // Untimed, before the warm-up and before every sample when set: what the
  // contestant needs around it that another one changes (a thread count).
  Runner prepare = {};
};

struct TimingOptions {
  int warmup = 2;          // untimed calls of each contestant before the first round
  int min_rounds = 5;      // at least this many samples of each contestant
  int max_rounds = 51;     // and at most this many
  double min_seconds = 1;  // keep adding rounds until the samples of a contestant sum to this
  double min_sample_seconds = 2e-3;  // a sample repeats its contestant at least this long
  // An idle pause after every sample. LibTorch's OpenMP workers spin for a
  // few milliseconds after each parallel region (libgomp's default spin
  // count); without the pause they steal a core from whichever contestant
  // runs next (measured: +25% on an xtgrad FFN step at N = 128).
  // bench_xtgrad sets it to 0 where no such worker spins (see its main).
  double settle_seconds = 0.01;
};

// Seconds per call of one contestant.
struct Timing {
  double median = 0;
  double min = 0;
  double max = 0;
  int inner = 0;                // calls per sample
  std::vector<double> samples;  // one per round, in round order
};

// The median over rounds of a's sample over b's sample of the same round: the
// ratio of two contestants, robust to load that changes from round to round.
double paired_ratio(const Timing& a, const Timing& b);

// Times every contestant (see the file comment); result i belongs to contestant i.
std::vector<Timing> measure_interleaved(const std::vector<Contestant>& contestants,
                                        const TimingOptions& options);

double median(std::vector<double> values);

// Resident set size of this process now (VmRSS) and its peak (VmHWM), in KiB,
// from /proc/self/status; -1 when unavailable.
long resident_kib();
long peak_resident_kib();

}  // namespace xtgrad::bench
