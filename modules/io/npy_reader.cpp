#include "npy.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <system_error>
#include <type_traits>

namespace xtgrad {

namespace {

namespace fs = std::filesystem;

// '<' is the byte order save_npy writes and the native order load_npy
// assumes for '|' and '='; a big-endian port would swap on write.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "xtgrad's .npy I/O assumes a little-endian host");

constexpr char k_magic[] = "\x93NUMPY";
constexpr std::size_t k_magic_size = 6;
constexpr std::size_t k_preamble_size = k_magic_size + 2;  // magic + major + minor
// numpy's ARRAY_ALIGN: the data of a file numpy writes starts at a multiple of 64.
constexpr std::size_t k_alignment = 64;
// Far above any real header (numpy itself refuses more than 10000 bytes by
// default); bounds the one allocation made before the header is validated.
constexpr std::size_t k_max_header_bytes = std::size_t(1) << 20;
// NumPy 2's NPY_MAXDIMS.
constexpr std::size_t k_max_dims = 64;
// How much of a malformed header an error message quotes.
constexpr std::size_t k_max_quoted_header = 200;

std::string in_quotes(const fs::path& path) {
  return "'" + path.string() + "'";
}

[[noreturn]] void fail_content(const char* fn, const fs::path& path, const std::string& what) {
  throw std::invalid_argument(std::string("xtgrad::") + fn + ": file " + in_quotes(path) + ": " +
                              what);
}

[[noreturn]] void fail_io(const char* fn, const std::string& action, const fs::path& path,
                          int error) {
  throw std::runtime_error(std::string("xtgrad::") + fn + ": cannot " + action + " " +
                           in_quotes(path) + ": " + std::generic_category().message(error));
}

// Printable ASCII as is, anything else as \xNN; long texts are cut.
std::string escaped(const std::string& bytes) {
  std::string out;
  for (std::size_t i = 0; i < bytes.size() && i < k_max_quoted_header; ++i) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char buffer[8];
      std::snprintf(buffer, sizeof buffer, "\\x%02x", c);
      out += buffer;
    }
  }
  if (bytes.size() > k_max_quoted_header) out += "...";
  return out;
}

std::string shape_tuple(const std::vector<std::size_t>& shape) {
  std::string out = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) out += ",";
  return out + ")";
}

class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  FileDescriptor& operator=(FileDescriptor&&) = delete;
  int get() const { return fd_; }
  // close() reports write-back errors on some file systems, so it is checked.
  int close() {
    const int result = ::close(fd_);
    fd_ = -1;
    return result;
  }

 private:
  int fd_;
};

// ---------------------------------------------------------------- reading

struct InputFile {
  const char* fn;
  fs::path path;
  FileDescriptor fd;
  std::size_t size;
};

// Reads exactly n bytes or throws: the sizes were checked against fstat, so
// a short read means the file changed underneath us.
void read_exact(const InputFile& file, void* buffer, std::size_t n) {
  auto* out = static_cast<char*>(buffer);
  while (n > 0) {
    const ::ssize_t got = ::read(file.fd.get(), out, n);
    if (got < 0) {
      if (errno == EINTR) continue;
      fail_io(file.fn, "read", file.path, errno);
    }
    if (got == 0)
      throw std::runtime_error(std::string("xtgrad::") + file.fn + ": cannot read " +
                               in_quotes(file.path) + ": unexpected end of file (did it change?)");
    out += got;
    n -= static_cast<std::size_t>(got);
  }
}

// The header dict, parsed strictly: exactly the keys 'descr' (a string),
// 'fortran_order' (True / False) and 'shape' (a tuple of non-negative ints),
// in any order, each once; Python's whitespace and trailing commas; nothing
// but whitespace after the closing brace.
class HeaderParser {
 public:
  HeaderParser(const InputFile& file, const std::string& text) : file_(file), text_(text) {}

  void parse(NpyHeader& header) {
    bool has_descr = false, has_order = false, has_shape = false;
    skip_space();
    expect('{', "'{' opening the header dict");
    skip_space();
    while (!at('}')) {
      const std::string key = parse_string("a quoted key");
      skip_space();
      expect(':', "':' after key '" + key + "'");
      skip_space();
      if (key == "descr") {
        mark_once(has_descr, key);
        header.descr = parse_string("a quoted dtype descr such as '<f4'");
      } else if (key == "fortran_order") {
        mark_once(has_order, key);
        header.fortran_order = parse_bool();
      } else if (key == "shape") {
        mark_once(has_shape, key);
        header.shape = parse_shape();
      } else {
        fail("unexpected key '" + key + "', expected only 'descr', 'fortran_order' and 'shape'");
      }
      skip_space();
      if (at(',')) {
        ++pos_;
        skip_space();
      } else if (!at('}')) {
        fail_expected("',' or '}' after the value of '" + key + "'");
      }
    }
    ++pos_;  // '}'
    skip_space();
    if (pos_ != text_.size()) fail_expected("only padding after the closing '}'");
    if (!has_descr) fail("the header has no 'descr' key");
    if (!has_order) fail("the header has no 'fortran_order' key");
    if (!has_shape) fail("the header has no 'shape' key");
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    fail_content(file_.fn, file_.path,
                 "malformed .npy header: " + what + " (header: \"" + escaped(text_) + "\")");
  }
  [[noreturn]] void fail_expected(const std::string& expected) const {
    const std::string found =
        pos_ < text_.size() ? "'" + escaped(text_.substr(pos_, 1)) + "'" : "the end of the header";
    fail("at byte " + std::to_string(pos_) + " expected " + expected + ", found " + found);
  }
  void mark_once(bool& seen, const std::string& key) const {
    if (seen) fail("duplicate key '" + key + "'");
    seen = true;
  }
  bool at(char c) const { return pos_ < text_.size() && text_[pos_] == c; }
  void expect(char c, const std::string& what) {
    if (!at(c)) fail_expected(what);
    ++pos_;
  }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }

  // A Python string literal without escapes: '...' or "...".
  std::string parse_string(const std::string& what) {
    if (!at('\'') && !at('"')) fail_expected(what);
    const char quote = text_[pos_++];
    const std::size_t begin = pos_;
    while (pos_ < text_.size() && text_[pos_] != quote) {
      const auto c = static_cast<unsigned char>(text_[pos_]);
      if (c < 0x20 || c >= 0x7f || c == '\\') fail_expected("a plain ASCII string character");
      ++pos_;
    }
    if (pos_ == text_.size()) fail_expected(std::string("the closing ") + quote + " of a string");
    return text_.substr(begin, pos_++ - begin);
  }

  bool parse_bool() {
    if (text_.compare(pos_, 4, "True") == 0) {
      pos_ += 4;
      return true;
    }
    if (text_.compare(pos_, 5, "False") == 0) {
      pos_ += 5;
      return false;
    }
    fail_expected("True or False for 'fortran_order'");
  }

  std::size_t parse_dimension() {
    if (at('-')) fail("negative dimension in 'shape'");
    if (pos_ >= text_.size() || text_[pos_] < '0' || text_[pos_] > '9')
      fail_expected("a non-negative integer dimension in 'shape'");
    std::size_t value = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      const auto digit = static_cast<std::size_t>(text_[pos_] - '0');
      if (value > (std::numeric_limits<std::size_t>::max() - digit) / 10)
        fail("dimension in 'shape' overflows a 64-bit size");
      value = value * 10 + digit;
      ++pos_;
    }
    if (at('L')) ++pos_;  // Python 2 long literal, as in files written by numpy under Python 2
    return value;
  }

  std::vector<std::size_t> parse_shape() {
    std::vector<std::size_t> shape;
    expect('(', "'(' opening the 'shape' tuple");
    skip_space();
    if (at(')')) {
      ++pos_;
      return shape;
    }
    while (true) {
      if (shape.size() == k_max_dims)
        fail("'shape' has more than " + std::to_string(k_max_dims) + " dimensions");
      shape.push_back(parse_dimension());
      skip_space();
      if (at(',')) {
        ++pos_;
        skip_space();
        if (at(')')) break;
        continue;
      }
      if (!at(')')) fail_expected("',' or ')' in the 'shape' tuple");
      if (shape.size() == 1)
        fail("'shape' (n) is not a tuple; a one-dimensional shape is written (n,)");
      break;
    }
    ++pos_;  // ')'
    return shape;
  }

  const InputFile& file_;
  const std::string& text_;
  std::size_t pos_ = 0;
};

InputFile open_input(const char* fn, const fs::path& path) {
  // O_NONBLOCK: opening a FIFO would otherwise wait for a writer (a hostile
  // checkpoint could hang load); it is refused below as not a regular file,
  // and has no effect on reading a regular file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail_io(fn, "open", path, errno);
  InputFile file{fn, path, FileDescriptor(fd), 0};
  struct ::stat info {};
  if (::fstat(fd, &info) != 0) fail_io(fn, "stat", path, errno);
  if (!S_ISREG(info.st_mode)) fail_io(fn, "read", path, S_ISDIR(info.st_mode) ? EISDIR : EINVAL);
  file.size = static_cast<std::size_t>(info.st_size);
  return file;
}

// Reads the preamble and header of an open file and validates all of it,
// leaving the file positioned at the first element. Sets `big_endian`.
NpyHeader read_header(InputFile& file, bool& big_endian) {
  const char* fn = file.fn;
  const fs::path& path = file.path;
  if (file.size < k_preamble_size)
    fail_content(fn, path,
                 "has " + std::to_string(file.size) +
                     " bytes, too short for a .npy file (at least " +
                     std::to_string(k_preamble_size + 2) + " expected)");
  unsigned char preamble[k_preamble_size];
  read_exact(file, preamble, k_preamble_size);
  if (std::memcmp(preamble, k_magic, k_magic_size) != 0)
    fail_content(fn, path,
                 "is not a .npy file: it starts with \"" +
                     escaped(std::string(reinterpret_cast<char*>(preamble), k_magic_size)) +
                     "\", expected the magic \"\\x93NUMPY\"");
  const unsigned major = preamble[6], minor = preamble[7];
  if (major < 1 || major > 3 || minor != 0)
    fail_content(fn, path,
                 "unsupported .npy format version " + std::to_string(major) + "." +
                     std::to_string(minor) + ", expected 1.0, 2.0 or 3.0");

  // Version 1.0 stores the header length as uint16, 2.0 and 3.0 as uint32 (little-endian).
  const std::size_t length_bytes = major == 1 ? 2 : 4;
  if (file.size < k_preamble_size + length_bytes)
    fail_content(fn, path,
                 "has " + std::to_string(file.size) +
                     " bytes, too short for the header length of "
                     "a version " +
                     std::to_string(major) + ".0 file");
  unsigned char length_field[4] = {0, 0, 0, 0};
  read_exact(file, length_field, length_bytes);
  std::size_t header_length = 0;
  for (std::size_t i = length_bytes; i-- > 0;) header_length = header_length << 8 | length_field[i];
  const std::size_t data_offset = k_preamble_size + length_bytes + header_length;
  if (header_length > k_max_header_bytes)
    fail_content(fn, path,
                 "header length " + std::to_string(header_length) + " exceeds the limit of " +
                     std::to_string(k_max_header_bytes) + " bytes");
  if (data_offset > file.size)
    fail_content(fn, path,
                 "header length " + std::to_string(header_length) +
                     " runs past the end of the file (the header would end at byte " +
                     std::to_string(data_offset) + ", the file has " + std::to_string(file.size) +
                     " bytes)");

  std::string text(header_length, '\0');
  read_exact(file, text.data(), header_length);
  NpyHeader header;
  HeaderParser(file, text).parse(header);
  header.data_offset = data_offset;

  // descr: an optional byte order ('<' little, '>' big, '|' not applicable,
  // '=' native) and the type code f4 or f8.
  const std::string& descr = header.descr;
  const std::size_t code = descr.size() == 3 ? 1 : 0;
  const bool order_ok = code == 0 || std::string("<>|=").find(descr[0]) != std::string::npos;
  const std::string type_code = descr.substr(code);
  if ((descr.size() != 2 && descr.size() != 3) || !order_ok ||
      (type_code != "f4" && type_code != "f8"))
    fail_content(fn, path,
                 "unsupported dtype descr '" + escaped(descr) +
                     "', expected float32 ('<f4') or float64 ('<f8') in any byte order");
  header.dtype = type_code == "f4" ? "float32" : "float64";
  big_endian = code == 1 && descr[0] == '>';
  const std::size_t item_size = type_code == "f4" ? 4 : 8;

  // Size checks before anything of that size is allocated.
  std::size_t count = 1;
  bool empty = false;
  for (std::size_t d : header.shape) empty = empty || d == 0;
  if (empty) {
    count = 0;
  } else {
    for (std::size_t d : header.shape) {
      if (count > std::numeric_limits<std::size_t>::max() / d)
        fail_content(fn, path,
                     "shape " + shape_tuple(header.shape) +
                         " has more elements than a 64-bit size can count");
      count *= d;
    }
  }
  if (count > std::numeric_limits<std::size_t>::max() / item_size)
    fail_content(fn, path,
                 "shape " + shape_tuple(header.shape) + " of " + header.dtype +
                     " has more bytes than a 64-bit size can count");
  header.size = count;
  const std::size_t expected_bytes = count * item_size;
  const std::size_t actual_bytes = file.size - data_offset;
  if (actual_bytes != expected_bytes) {
    const std::string declared = "the header declares shape " + shape_tuple(header.shape) + " of " +
                                 header.dtype + " (" + std::to_string(count) + " elements, " +
                                 std::to_string(expected_bytes) + " bytes)";
    if (actual_bytes < expected_bytes)
      fail_content(fn, path,
                   "is truncated: " + declared + " but only " + std::to_string(actual_bytes) +
                       " data bytes follow the header");
    fail_content(fn, path,
                 "has trailing data: " + declared + " but " + std::to_string(actual_bytes) +
                     " data bytes follow the header");
  }
  return header;
}

template <class T>
void swap_bytes(T* data, std::size_t n) {
  using Word = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  for (std::size_t i = 0; i < n; ++i) {
    Word word;
    std::memcpy(&word, data + i, sizeof word);
    if constexpr (sizeof(T) == 4)
      word = __builtin_bswap32(word);
    else
      word = __builtin_bswap64(word);
    std::memcpy(data + i, &word, sizeof word);
  }
}

template <class T, class Array>
void read_elements(InputFile& file, Array& array, bool big_endian) {
  read_exact(file, array.data(), array.size() * sizeof(T));
  if (big_endian) swap_bytes(array.data(), array.size());
}

// ---------------------------------------------------------------- writing

void write_all(const char* fn, int fd, const void* data, std::size_t n, const fs::path& path) {
  const auto* in = static_cast<const char*>(data);
  while (n > 0) {
    const ::ssize_t put = ::write(fd, in, n);
    if (put < 0) {
      if (errno == EINTR) continue;
      fail_io(fn, "write", path, errno);
    }
    in += put;
    n -= static_cast<std::size_t>(put);
  }
}

// Creates `path` (O_EXCL), lets `fill` write the contents, fsyncs and closes;
// any failure removes the partial file.
template <class Fill>
void write_new_file_with(const char* fn, const fs::path& path, Fill fill) {
  const int raw = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (raw < 0) fail_io(fn, "create", path, errno);
  FileDescriptor fd(raw);
  try {
    fill(fd.get());
    if (::fsync(fd.get()) != 0) fail_io(fn, "fsync", path, errno);
    if (fd.close() != 0) fail_io(fn, "close", path, errno);
  } catch (...) {
    if (fd.get() >= 0) fd.close();
    ::unlink(path.c_str());
    throw;
  }
}

template <class T>
std::string npy_header(const std::vector<std::size_t>& shape) {
  // The dict exactly as numpy formats it (sorted keys, repr of each value).
  std::string dict = std::string("{'descr': '") + (sizeof(T) == 4 ? "<f4" : "<f8") +
                     "', 'fortran_order': False, 'shape': " + shape_tuple(shape) + ", }";
  const std::size_t used = k_preamble_size + 2 + dict.size() + 1;  // + the final '\n'
  dict.append((k_alignment - used % k_alignment) % k_alignment, ' ');
  dict += '\n';
  std::string out(k_magic, k_magic_size);
  out += '\x01';  // version 1.0
  out += '\x00';
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>(dict.size() >> 8);
  return out + dict;
}

}  // namespace

NpyHeader read_npy_header(const fs::path& path) {
  InputFile file = open_input("read_npy_header", path);
  bool big_endian = false;
  return read_header(file, big_endian);
}

template <class T>
xt::xarray<T> load_npy(const fs::path& path) {
  InputFile file = open_input("load_npy", path);
  bool big_endian = false;
  const NpyHeader header = read_header(file, big_endian);
  if (header.dtype != npy_dtype_name<T>())
    fail_content("load_npy", path,
                 "has dtype " + header.dtype + " ('" + header.descr + "'), expected " +
                     npy_dtype_name<T>() + " ('" + (sizeof(T) == 4 ? "<f4" : "<f8") +
                     "'); xtgrad does not convert between float32 and float64 silently");
  // From here on the allocation is bounded by the file's size (checked above).
  if (header.fortran_order) {
    auto column_major = xt::xarray<T, xt::layout_type::column_major>::from_shape(header.shape);
    read_elements<T>(file, column_major, big_endian);
    return xt::xarray<T>(column_major);  // a strided copy into row-major order
  }
  auto array = xt::xarray<T>::from_shape(header.shape);
  read_elements<T>(file, array, big_endian);
  return array;
}

template <class T>
void save_npy(const fs::path& path, const xt::xarray<T>& array) {
  if (path.filename().empty() || path.filename() == "." || path.filename() == "..")
    throw std::invalid_argument("xtgrad::save_npy: path " + in_quotes(path) +
                                " names a directory, expected a file path such as 'w.npy'");
  const fs::path temporary =
      path.parent_path() / (path.filename().string() + ".tmp-" + detail::random_suffix());
  detail::write_npy_file(temporary, array, "save_npy");
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temporary.c_str());
    fail_io("save_npy", "rename a temporary file onto", path, error);
  }
  detail::fsync_directory(path.parent_path().empty() ? fs::path(".") : path.parent_path());
}

namespace detail {

template <class T>
void write_npy_file(const fs::path& path, const xt::xarray<T>& array, const char* caller) {
  const std::vector<std::size_t> shape(array.shape().begin(), array.shape().end());
  if (shape.size() > k_max_dims)
    throw std::invalid_argument(std::string("xtgrad::") + caller + ": array for " +
                                in_quotes(path) + " has " + std::to_string(shape.size()) +
                                " dimensions, at most " + std::to_string(k_max_dims) +
                                " are supported");
  const std::string header = npy_header<T>(shape);
  write_new_file_with(caller, path, [&](int fd) {
    write_all(caller, fd, header.data(), header.size(), path);
    // xt::xarray<T> is contiguous row-major: its buffer is the C-order data.
    write_all(caller, fd, array.data(), array.size() * sizeof(T), path);
  });
}

void write_new_file(const fs::path& path, const std::string& bytes, const char* caller) {
  write_new_file_with(caller, path,
                      [&](int fd) { write_all(caller, fd, bytes.data(), bytes.size(), path); });
}

void fsync_directory(const fs::path& dir) noexcept {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

std::string random_suffix() {
  // random_device alone may be a deterministic PRNG on some platforms; the
  // counter keeps names of one process distinct regardless.
  static std::atomic<std::uint64_t> counter{0};
  std::random_device device;
  const std::uint64_t value = (std::uint64_t(device()) << 32 ^ device()) ^
                              (counter.fetch_add(1) * 0x9E3779B97F4A7C15ull) ^
                              static_cast<std::uint64_t>(::getpid());
  char buffer[17];
  std::snprintf(buffer, sizeof buffer, "%016llx", static_cast<unsigned long long>(value));
  return buffer;
}

template void write_npy_file(const fs::path&, const xt::xarray<float>&, const char*);
template void write_npy_file(const fs::path&, const xt::xarray<double>&, const char*);

}  // namespace detail

template void save_npy(const fs::path&, const xt::xarray<float>&);
template void save_npy(const fs::path&, const xt::xarray<double>&);
template xt::xarray<float> load_npy(const fs::path&);
template xt::xarray<double> load_npy(const fs::path&);

}  // namespace xtgrad
