#include "scratch.hpp"

#include <array>
#include <cstdint>
#include <vector>

namespace xtgrad::detail {

template <class T>
T* thread_scratch(ScratchSlot slot, std::size_t size) {
  thread_local std::array<std::vector<T>, static_cast<std::size_t>(ScratchSlot::count)> buffers;
  std::vector<T>& buffer = buffers[static_cast<std::size_t>(slot)];
  if (buffer.size() < size) buffer.resize(size);
  return buffer.data();
}

template <class T>
T* aligned_thread_scratch(ScratchSlot slot, std::size_t size) {
  constexpr std::size_t line = k_line_bytes;
  static_assert(line % sizeof(T) == 0);
  T* buffer = thread_scratch<T>(slot, size + line / sizeof(T));
  const std::uintptr_t address = reinterpret_cast<std::uintptr_t>(buffer);
  return buffer + ((line - address % line) % line) / sizeof(T);
}

template float* thread_scratch<float>(ScratchSlot, std::size_t);
template double* thread_scratch<double>(ScratchSlot, std::size_t);
template std::uint16_t* thread_scratch<std::uint16_t>(ScratchSlot, std::size_t);
template float* aligned_thread_scratch<float>(ScratchSlot, std::size_t);
template double* aligned_thread_scratch<double>(ScratchSlot, std::size_t);
template std::uint32_t* aligned_thread_scratch<std::uint32_t>(ScratchSlot, std::size_t);

}  // namespace xtgrad::detail
