#include "checked_size.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "errors.hpp"

namespace xtgrad::detail {

namespace {

constexpr const char* k_size_t_limit = " overflows std::size_t (at most 18446744073709551615)";

}  // namespace

std::string WideCount::str() const {
  std::string digits;
  wide v = value_;
  do {
    digits += static_cast<char>('0' + static_cast<int>(v % 10));
    v /= 10;
  } while (v != 0);
  const std::string decimal(digits.rbegin(), digits.rend());
  return value_ == k_max ? "at least " + decimal : decimal;
}

std::size_t max_allocation_bytes() {
  static const std::size_t bound = [] {
    const auto largest = static_cast<std::size_t>(PTRDIFF_MAX);
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
    if (pages <= 0 || page <= 0) return largest;  // unknown: the allocator's bound only
    const WideCount physical =
        WideCount(static_cast<std::size_t>(pages)) * WideCount(static_cast<std::size_t>(page));
    return physical <= WideCount(largest) ? physical.value() : largest;
  }();
  return bound;
}

std::size_t checked_multiply(const char* function, const char* names, std::size_t a,
                             std::size_t b) {
  const WideCount product = WideCount(a) * WideCount(b);
  if (!product.fits())
    fail_value(function, message(names, ": ", a, " * ", b, " = ", product.str(), k_size_t_limit));
  return product.value();
}

std::size_t checked_add(const char* function, const char* names, std::size_t a, std::size_t b) {
  const WideCount sum = WideCount(a) + WideCount(b);
  if (!sum.fits())
    fail_value(function, message(names, ": ", a, " + ", b, " = ", sum.str(), k_size_t_limit));
  return sum.value();
}

std::size_t checked_sum(const char* function, const char* names,
                        const std::vector<std::size_t>& terms) {
  WideCount sum;
  for (const std::size_t t : terms) sum += WideCount(t);
  if (!sum.fits())
    fail_value(function,
               message(names, ": the sum of ", shape_str(terms), " = ", sum.str(), k_size_t_limit));
  return sum.value();
}

std::string shape_text(const std::size_t* sizes, std::size_t rank) {
  return shape_str(std::vector<std::size_t>(sizes, sizes + rank));
}

void fail_element_count(const char* function, const char* names, const std::string& shape,
                        WideCount count, WideCount span) {
  constexpr const char* limit = " overflows std::ptrdiff_t (at most 9223372036854775807)";
  if (count.fits() && count.value() == 0)
    fail_value(function, message(names, ": the shape ", shape, " of no elements", limit,
                                 " in its strides: its nonzero sizes multiply to ", span.str()));
  fail_value(function,
             message(names, ": the shape ", shape, " of ", count.str(), " elements", limit));
}

void check_bytes(const char* function, const char* names, const std::string& what, WideCount count,
                 std::size_t element_size) {
  const WideCount bytes = count * WideCount(element_size);
  const std::size_t bound = max_allocation_bytes();
  if (bytes <= WideCount(bound)) return;
  const bool physical = bound < static_cast<std::size_t>(PTRDIFF_MAX);
  fail_value(function,
             message(names, ": ", what, " of ", count.str(), " elements of ", element_size,
                     " bytes each = ", bytes.str(), " bytes, more than the ", bound,
                     physical ? " bytes of this machine's physical memory"
                              : " bytes one allocation can hold"));
}

void rethrow_out_of_memory(const char* function, const std::string& what, WideCount count,
                           std::size_t element_size, const std::exception& cause) {
  throw OutOfMemoryError(message("xtgrad::", function, ": out of memory allocating ", what, " of ",
                                 count.str(), " elements of ", element_size,
                                 " bytes each = ", (count * WideCount(element_size)).str(),
                                 " bytes (", cause.what(), ")"));
}

}  // namespace xtgrad::detail
