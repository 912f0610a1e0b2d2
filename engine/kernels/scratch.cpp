#include "scratch.hpp"

#include <array>
#include <vector>

namespace xtgrad::detail {

template <class T>
T* thread_scratch(ScratchSlot slot, std::size_t size) {
  thread_local std::array<std::vector<T>, static_cast<std::size_t>(ScratchSlot::count)> buffers;
  std::vector<T>& buffer = buffers[static_cast<std::size_t>(slot)];
  if (buffer.size() < size) buffer.resize(size);
  return buffer.data();
}

template float* thread_scratch<float>(ScratchSlot, std::size_t);
template double* thread_scratch<double>(ScratchSlot, std::size_t);

}  // namespace xtgrad::detail
