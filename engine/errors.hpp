#pragma once
// The one set of error helpers of xtgrad: how messages are formatted and
// which exception each kind of mistake throws. Engine, modules, the I/O code
// and optim all raise through these, so every message starts with
// "xtgrad::<function>:" and reads the same way (Stan Math's check_* style).
//
//   std::invalid_argument  a shape, name, index or value the caller passed
//   std::logic_error       misuse of a tape or of an object's protocol
//   std::runtime_error     an I/O failure (a file that cannot be read or written)
//
// Plain formatting only: nothing here knows about tapes or Vars (the
// Var-aware checks are in check.hpp, above the tape).

#include <cstddef>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace xtgrad::detail {

// "[2, 3]" for any container of sizes; "[]" for a 0-d shape.
template <class S>
std::string shape_str(const S& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// A number as messages print it: "-0.5", "1e-08", "inf", "nan".
inline std::string number_str(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

// 'text', the quoting every message uses for names, paths and values.
inline std::string quoted(const std::string& text) {
  return "'" + text + "'";
}

// Text read from a file, made safe to print in a message: printable ASCII as
// is, a backslash doubled, tab, newline and carriage return as \t \n \r, any
// other byte as \xNN. At most `max_chars` input bytes are shown, then "...".
inline std::string escaped(const std::string& text, std::size_t max_chars = std::string::npos) {
  static constexpr char k_hex[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < text.size() && i < max_chars; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += k_hex[c >> 4];
      out += k_hex[c & 0xf];
    }
  }
  if (text.size() > max_chars) out += "...";
  return out;
}

// How much of one name or value read from a file a message quotes.
inline constexpr std::size_t k_max_quoted_bytes = 200;

// A name or value read from a file as messages quote it: escaped, at most
// k_max_quoted_bytes of it, in quotes.
inline std::string quoted_escaped(const std::string& text) {
  return quoted(escaped(text, k_max_quoted_bytes));
}

// "xtgrad::<function>: argument '<arg>' <message>" as std::invalid_argument.
[[noreturn]] inline void fail_argument(const std::string& function, const std::string& arg,
                                       const std::string& message) {
  throw std::invalid_argument("xtgrad::" + function + ": argument " + quoted(arg) + " " + message);
}

// "argument 'w1' has shape [3, 5], expected [4, 5] (...)".
template <class S>
[[noreturn]] void fail_shape(const std::string& function, const std::string& arg, const S& got,
                             const std::string& expected) {
  fail_argument(function, arg, "has shape " + shape_str(got) + ", expected " + expected);
}

// "xtgrad::<function>: <message>" as std::invalid_argument, for bad content
// that is not one argument (a file, a manifest line, a state dict entry).
[[noreturn]] inline void fail_value(const std::string& function, const std::string& message) {
  throw std::invalid_argument("xtgrad::" + function + ": " + message);
}

// "xtgrad::<function>: <message>" as std::logic_error.
[[noreturn]] inline void fail_logic(const std::string& function, const std::string& message) {
  throw std::logic_error("xtgrad::" + function + ": " + message);
}

// "xtgrad::<function>: <message>" as std::runtime_error.
[[noreturn]] inline void fail_io(const std::string& function, const std::string& message) {
  throw std::runtime_error("xtgrad::" + function + ": " + message);
}

// One part of a message: text as is, an integer in decimal, a floating-point
// value as number_str prints it, a shape (any container of integers) as
// shape_str prints it.
inline std::string message_part(const char* text) {
  return text;
}
inline std::string message_part(const std::string& text) {
  return text;
}
template <class V, std::enable_if_t<std::is_arithmetic_v<V>, int> = 0>
std::string message_part(V value) {
  if constexpr (std::is_same_v<V, bool>) return value ? "true" : "false";
  if constexpr (std::is_integral_v<V>) return std::to_string(value);
  return number_str(static_cast<double>(value));
}
template <class S, class = decltype(std::declval<const S&>().size()),
          std::enable_if_t<std::is_integral_v<std::decay_t<decltype(std::declval<const S&>()[0])>>,
                           int> = 0>
std::string message_part(const S& shape) {
  return shape_str(shape);
}

template <class... Parts>
std::string message(const Parts&... parts) {
  return (std::string() + ... + message_part(parts));
}

// The declarative argument checks of one function, in the spirit of
// PyTorch's TORCH_CHECK: a condition and the parts of the message, with the
// function named once. The message is built only when the check fails, so a
// check costs one branch. Each throws through the fail_* helpers above:
//
//   const detail::Check check("linear");
//   check.shape(w.dimension() == 2, "weight", w.shape(), "rank 2 [out, in]");
//   check.argument(p >= 0 && p < 1, "p", "is ", p, ", expected a value in [0, 1)");
class Check {
 public:
  explicit Check(const char* function) : function_(function) {}

  const char* function() const { return function_; }

  // std::invalid_argument "xtgrad::f: argument 'arg' <parts...>".
  template <class... Parts>
  void argument(bool ok, const char* arg, const Parts&... parts) const {
    if (!ok) fail_argument(function_, arg, message(parts...));
  }
  // std::invalid_argument "xtgrad::f: argument 'arg' has shape [..], expected <parts...>".
  template <class S, class... Parts>
  void shape(bool ok, const char* arg, const S& got, const Parts&... expected) const {
    if (!ok) fail_shape(function_, arg, got, message(expected...));
  }
  // std::invalid_argument "xtgrad::f: <parts...>", for bad content that is not one argument.
  template <class... Parts>
  void value(bool ok, const Parts&... parts) const {
    if (!ok) fail_value(function_, message(parts...));
  }
  // std::logic_error "xtgrad::f: <parts...>", for misuse of a tape or an object's protocol.
  template <class... Parts>
  void logic(bool ok, const Parts&... parts) const {
    if (!ok) fail_logic(function_, message(parts...));
  }

 private:
  const char* function_;
};

// A size argument of a constructor: std::invalid_argument when it is 0.
inline void check_positive_size(const std::string& function, const std::string& arg,
                                std::size_t value) {
  if (value == 0) fail_argument(function, arg, "is 0, expected a positive size");
}

}  // namespace xtgrad::detail
