#pragma once
// Checked size arithmetic: every size, count and offset that xtgrad computes
// from a caller's arguments (shape products, sums of split sizes, heads times
// head size, a module's parameter count, a cache's capacity) goes through
// these helpers, so that no product or sum wraps around std::size_t and no
// buffer is requested that can never be allocated.
//
//   checked_multiply(function, names, a, b)   a * b
//   checked_add(function, names, a, b)        a + b
//   checked_sum(function, names, terms)       the sum of a list of sizes
//   element_count(function, names, shape)     the product of a shape's sizes; its
//                                             nonzero sizes must multiply to at most
//                                             PTRDIFF_MAX, xtensor's strides being
//                                             std::ptrdiff_t even with no element
//   checked_allocation<T>(function, names, shape)
//                                             element_count, and its bytes within
//                                             max_allocation_bytes()
//   check_bytes(function, names, what, count, element_size)
//                                             count * element_size within
//                                             max_allocation_bytes() (a module's
//                                             parameters, a cache's buffers)
//
// `names` is the caller's phrase for the arguments the size comes from
// ("arguments 'rows' and 'cols'", "argument 'shape'"). A size that wraps, or
// a byte count past the bound, throws std::invalid_argument
//
//   xtgrad::causal_mask: arguments 'rows' and 'cols': the shape [4294967296, 4294967296]
//   of 18446744073709551616 elements overflows std::size_t (at most 18446744073709551615)
//   xtgrad::GPT: arguments 'vocab_size', 'block_size', 'n_layer', 'n_embd' and
//   'ffn_hidden': parameters of 281474976710656 elements of 4 bytes each =
//   1125899906842624 bytes, more than the 25165824000 bytes of this machine's
//   physical memory
//
// before the caller records or changes anything.
//
// The bound, max_allocation_bytes(), is the smaller of PTRDIFF_MAX (no object
// can be larger: std::allocator's max_size) and the machine's physical memory
// (sysconf). Physical memory, not free memory: every buffer xtgrad allocates
// is written in full (initialized parameters, a result, a mask), so a request
// past physical memory cannot succeed on this machine, and with the kernel's
// overcommit it would not fail where it is made but end the process later
// (the OOM killer; an abort under AddressSanitizer). Free memory changes with
// other processes; physical memory makes the answer the same for a given
// machine. A request below the bound that still fails is reported by the
// modules as OutOfMemoryError, a std::bad_alloc naming the module and the
// bytes (rethrow_out_of_memory).
//
// The arithmetic is done in 128 bits (WideCount), saturating, so that the
// message states the exact count even when it does not fit in std::size_t.

#include <cstddef>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <new>
#include <string>
#include <utility>
#include <vector>

namespace xtgrad {

// A buffer below max_allocation_bytes() that the allocator could not
// provide: a std::bad_alloc whose what() names the module, what it was
// allocating and how many bytes (torch.OutOfMemoryError's role).
class OutOfMemoryError : public std::bad_alloc {
 public:
  explicit OutOfMemoryError(std::string what) : what_(std::move(what)) {}
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  std::string what_;
};

namespace detail {

// A count in 128 bits that saturates instead of wrapping: exact for any
// product of two size_t and any sum of a few such products.
class WideCount {
 public:
  WideCount(std::size_t n = 0) : value_(n) {}  // NOLINT: a size converts implicitly

  friend WideCount operator*(WideCount a, WideCount b) {
    WideCount out;
    if (a.value_ != 0 && b.value_ > k_max / a.value_)
      out.value_ = k_max;
    else
      out.value_ = a.value_ * b.value_;
    return out;
  }
  friend WideCount operator+(WideCount a, WideCount b) {
    WideCount out;
    out.value_ = b.value_ > k_max - a.value_ ? k_max : a.value_ + b.value_;
    return out;
  }
  WideCount& operator*=(WideCount b) { return *this = *this * b; }
  WideCount& operator+=(WideCount b) { return *this = *this + b; }
  friend bool operator<=(WideCount a, WideCount b) { return a.value_ <= b.value_; }

  bool fits() const { return value_ <= static_cast<wide>(SIZE_MAX); }
  bool fits_ptrdiff() const { return value_ <= static_cast<wide>(PTRDIFF_MAX); }
  std::size_t value() const { return static_cast<std::size_t>(value_); }  // when fits()
  // Decimal; "more than 340282366920938463463374607431768211454" once saturated.
  std::string str() const;

 private:
  __extension__ typedef unsigned __int128 wide;
  static constexpr wide k_max = ~wide(0);
  wide value_;
};

// min(PTRDIFF_MAX, physical memory): see above. Read once.
std::size_t max_allocation_bytes();

// The checks, each throwing std::invalid_argument as described above.
std::size_t checked_multiply(const char* function, const char* names, std::size_t a, std::size_t b);
std::size_t checked_add(const char* function, const char* names, std::size_t a, std::size_t b);
std::size_t checked_sum(const char* function, const char* names,
                        const std::vector<std::size_t>& terms);
// `what` describes the buffer ("the shape [2, 3]", "parameters"); count is
// checked to fit std::size_t first.
void check_bytes(const char* function, const char* names, const std::string& what, WideCount count,
                 std::size_t element_size);

// The message of a shape whose element count, or the product of its nonzero
// sizes (`span`), overflows; shared by the templates below.
[[noreturn]] void fail_element_count(const char* function, const char* names,
                                     const std::string& shape, WideCount count, WideCount span);
std::string shape_text(const std::size_t* sizes, std::size_t rank);

template <class S>
std::size_t element_count(const char* function, const char* names, const S& shape) {
  WideCount count(1), span(1);
  for (const auto s : shape) {
    count *= static_cast<std::size_t>(s);
    if (s != 0) span *= static_cast<std::size_t>(s);
  }
  if (!span.fits_ptrdiff()) {
    const std::vector<std::size_t> sizes(shape.begin(), shape.end());
    fail_element_count(function, names, shape_text(sizes.data(), sizes.size()), count, span);
  }
  return count.value();
}
inline std::size_t element_count(const char* function, const char* names,
                                 std::initializer_list<std::size_t> shape) {
  return element_count<std::initializer_list<std::size_t>>(function, names, shape);
}

template <class T, class S>
std::size_t checked_allocation(const char* function, const char* names, const S& shape) {
  const std::size_t count = element_count(function, names, shape);
  if (!(WideCount(count) * WideCount(sizeof(T)) <= WideCount(max_allocation_bytes()))) {
    const std::vector<std::size_t> sizes(shape.begin(), shape.end());
    check_bytes(function, names, "the shape " + shape_text(sizes.data(), sizes.size()), count,
                sizeof(T));
  }
  return count;
}
template <class T>
std::size_t checked_allocation(const char* function, const char* names,
                               std::initializer_list<std::size_t> shape) {
  return checked_allocation<T, std::initializer_list<std::size_t>>(function, names, shape);
}

// Inside a constructor's catch (const std::bad_alloc&): throws
// OutOfMemoryError "xtgrad::<function>: out of memory allocating <what> of
// <count> elements of <element_size> bytes each = <bytes> bytes (<cause>)".
[[noreturn]] void rethrow_out_of_memory(const char* function, const std::string& what,
                                        WideCount count, std::size_t element_size,
                                        const std::exception& cause);

}  // namespace detail
}  // namespace xtgrad
