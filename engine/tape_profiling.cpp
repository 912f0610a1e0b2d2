// The Tape's calls into its Profiler (tape.hpp, "Profiling"): kept out of
// tape.cpp so that the tape, which the profiler reads, does not include it.

#include "profiler.hpp"
#include "tape.hpp"

namespace xtgrad {

template <class T>
void Tape<T>::profile_forward_begin(std::size_t index) {
  profiler_->forward_begin(*this, index);
}

template <class T>
void Tape<T>::profile_forward_end(std::size_t index) {
  profiler_->forward_end(*this, index);
}

template <class T>
void Tape<T>::profile_backward(std::size_t index) {
  profiler_->backward_begin(*this, index);
  node_at(index).backward(*this, node_at(index).grad);
  profiler_->backward_end(*this, index);
}

#define XTGRAD_INSTANTIATE_TAPE_PROFILING(T)                 \
  template void Tape<T>::profile_forward_begin(std::size_t); \
  template void Tape<T>::profile_forward_end(std::size_t);   \
  template void Tape<T>::profile_backward(std::size_t);
XTGRAD_INSTANTIATE_TAPE_PROFILING(float)
XTGRAD_INSTANTIATE_TAPE_PROFILING(double)
#undef XTGRAD_INSTANTIATE_TAPE_PROFILING

}  // namespace xtgrad
