// The lifetime of a Tape's recording (tape.hpp, "Lifetime"): forgetting
// nodes (clear, the finished graph freed at the next recording, release)
// and the warning for a loop that records forward passes without ever
// freeing them.

#include <iostream>
#include <string>

#include "tape.hpp"

namespace xtgrad {

template <class T>
void Tape<T>::truncate(std::size_t count) {
  for (std::size_t i = count; i < size_; ++i) {
    node_at(i).backward = nullptr;  // drop captured buffers now, keep the node's own
    node_at(i).grad_rule = nullptr;
    node_at(i).param = nullptr;
  }
  graph_grads_.clear();
  size_ = count;
  free_on_record_ = false;
  reset_growth_watch();
}

template <class T>
void Tape<T>::clear() {
  truncate(0);
  kept_leaves_ = k_unset;
  cleared_stamp_ = next_stamp_;
}

template <class T>
void Tape<T>::free_graph() {
  if (kept_leaves_ == k_unset) {
    std::size_t leading = 0;
    while (leading < size_ && node_at(leading).is_leaf && !node_at(leading).param) ++leading;
    kept_leaves_ = leading;
  }
  truncate(kept_leaves_);
}

template <class T>
void Tape<T>::release() {
  clear();
  nodes_.clear();
  nodes_.shrink_to_fit();
}
template <class T>
void Tape<T>::watch_growth(const Parameter<T>& p) {
  if (growth_warning_ == 0 || growth_warned_) return;
  if (watched_param_ == nullptr) watched_param_ = &p;
  if (watched_param_ != &p || ++watched_records_ < growth_warning_) return;
  growth_warned_ = true;
  std::cerr << "xtgrad::Tape: warning: Parameter '" << p.name << "' was recorded "
            << watched_records_
            << " times since the last backward or clear(), and the tape keeps every recording: "
               "a loop that only runs forward (inference, evaluation) grows it without bound. "
               "Call tape.clear() at the start of each iteration, or use Module::infer, which "
               "keeps nothing (tape.set_growth_warning(0) turns this warning off).\n";
}

#define XTGRAD_INSTANTIATE_TAPE_LIFETIME(T)     \
  template void Tape<T>::truncate(std::size_t); \
  template void Tape<T>::clear();               \
  template void Tape<T>::free_graph();          \
  template void Tape<T>::release();             \
  template void Tape<T>::watch_growth(const Parameter<T>&);
XTGRAD_INSTANTIATE_TAPE_LIFETIME(float)
XTGRAD_INSTANTIATE_TAPE_LIFETIME(double)
#undef XTGRAD_INSTANTIATE_TAPE_LIFETIME

}  // namespace xtgrad
