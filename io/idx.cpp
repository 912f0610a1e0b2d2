// Reading IDX files, raw or gzip-compressed (the format and the checks are
// described in idx.hpp).

#include "idx.hpp"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>

#include "../engine/errors.hpp"
#include "files.hpp"

namespace xtgrad {

namespace {

namespace fs = std::filesystem;
using detail::InputFile;

constexpr const char* k_idx_function = "load_idx";
constexpr auto k_max_offset = static_cast<std::size_t>(std::numeric_limits<std::ptrdiff_t>::max());
constexpr std::size_t k_chunk = std::size_t{1} << 16;  // compressed bytes read at a time

[[noreturn]] void fail_content(const InputFile& file, const std::string& message) {
  detail::fail_value(file.function, detail::path_str(file.path) + ": " + message);
}

// The bytes of a file, decompressed when it starts with the gzip magic.
// read() returns fewer bytes than asked only at the end of the data.
class ByteSource {
 public:
  explicit ByteSource(InputFile& file) : file_(file) {
    std::array<unsigned char, 2> magic{};
    const std::size_t peek = std::min<std::size_t>(2, file_.size);
    detail::read_exact(file_, magic.data(), peek);
    consumed_ = peek;
    gzip_ = peek == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
    if (gzip_) {
      stream_ = std::make_unique<z_stream>();
      std::memset(stream_.get(), 0, sizeof(z_stream));
      // 16 + MAX_WBITS: a gzip wrapper, whose CRC-32 and length inflate checks.
      if (inflateInit2(stream_.get(), 16 + MAX_WBITS) != Z_OK)
        detail::fail_io(file_.function, "cannot start zlib for " + detail::path_str(file_.path));
      input_.assign(magic.begin(), magic.end());
      stream_->next_in = input_.data();
      stream_->avail_in = 2;
    } else {
      pending_.assign(magic.begin(), magic.begin() + static_cast<std::ptrdiff_t>(peek));
    }
  }
  ~ByteSource() {
    if (stream_) inflateEnd(stream_.get());
  }
  ByteSource(const ByteSource&) = delete;
  ByteSource& operator=(const ByteSource&) = delete;

  bool gzip() const { return gzip_; }
  // Bytes of the file not read yet (raw files: the data left to read).
  std::size_t file_left() const { return file_.size - consumed_; }

  std::size_t read(unsigned char* out, std::size_t n) {
    return gzip_ ? inflate_into(out, n) : read_raw(out, n);
  }

  // After the data: the gzip stream must end here and the file with it.
  void expect_end() {
    unsigned char extra = 0;
    if (read(&extra, 1) != 0)
      fail_content(file_, "has data after the elements its header declares");
    if (gzip_ && (stream_->avail_in > 0 || file_left() > 0))
      fail_content(file_, "has bytes after the end of its gzip stream");
  }

 private:
  std::size_t read_raw(unsigned char* out, std::size_t n) {
    std::size_t got = std::min(n, pending_.size());
    std::copy_n(pending_.begin(), got, out);
    pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(got));
    const std::size_t more = std::min(n - got, file_left());
    detail::read_exact(file_, out + got, more);
    consumed_ += more;
    return got + more;
  }

  std::size_t inflate_into(unsigned char* out, std::size_t n) {
    std::size_t got = 0;
    while (got < n && !ended_) {
      if (stream_->avail_in == 0) {
        const std::size_t chunk = std::min(k_chunk, file_left());
        if (chunk == 0)
          fail_content(file_, "is truncated: its gzip stream ends early (after " +
                                  std::to_string(stream_->total_out) + " decompressed bytes)");
        input_.resize(chunk);
        detail::read_exact(file_, input_.data(), chunk);
        consumed_ += chunk;
        stream_->next_in = input_.data();
        stream_->avail_in = static_cast<uInt>(chunk);
      }
      const std::size_t want = std::min<std::size_t>(n - got, std::numeric_limits<uInt>::max());
      stream_->next_out = out + got;
      stream_->avail_out = static_cast<uInt>(want);
      const int status = inflate(stream_.get(), Z_NO_FLUSH);
      got += want - stream_->avail_out;
      if (status == Z_STREAM_END) {
        ended_ = true;
      } else if (status != Z_OK && status != Z_BUF_ERROR) {
        fail_content(file_, std::string("is not a valid gzip stream (zlib: ") +
                                (stream_->msg ? stream_->msg : zError(status)) + ")");
      }
    }
    return got;
  }

  InputFile& file_;
  bool gzip_ = false;
  bool ended_ = false;
  std::size_t consumed_ = 0;            // bytes of the file read so far
  std::vector<unsigned char> pending_;  // raw: the magic bytes already read
  std::vector<unsigned char> input_;    // gzip: compressed input
  std::unique_ptr<z_stream> stream_;
};

bool is_idx_type(std::uint8_t byte) {
  return byte == 0x08 || byte == 0x09 || byte == 0x0B || byte == 0x0C || byte == 0x0D ||
         byte == 0x0E;
}

template <class V>
constexpr IdxType idx_type_of() {
  if constexpr (std::is_same_v<V, std::uint8_t>) return IdxType::u8;
  if constexpr (std::is_same_v<V, std::int8_t>) return IdxType::i8;
  if constexpr (std::is_same_v<V, std::int16_t>) return IdxType::i16;
  if constexpr (std::is_same_v<V, std::int32_t>) return IdxType::i32;
  if constexpr (std::is_same_v<V, float>) return IdxType::f32;
  if constexpr (std::is_same_v<V, double>) return IdxType::f64;
}

std::string shape_text(const std::vector<std::size_t>& shape) {
  std::string out;
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? " x " : "") + std::to_string(shape[i]);
  return out;
}

void read_header_bytes(ByteSource& source, const InputFile& file, unsigned char* out, std::size_t n,
                       const char* what) {
  if (source.read(out, n) != n) fail_content(file, std::string("is truncated in its ") + what);
}

// Reads the magic and the dimensions, and checks them against `max_elements`.
IdxHeader parse_header(ByteSource& source, const InputFile& file, std::size_t max_elements) {
  // Whatever the caller asks, the bytes of any element type, and xtensor's
  // strides, must fit a signed 64-bit offset.
  max_elements = std::min<std::size_t>(max_elements, k_max_offset / 8);
  std::array<unsigned char, 4> magic{};
  read_header_bytes(source, file, magic.data(), 4, "magic number (4 bytes)");
  if (magic[0] != 0 || magic[1] != 0)
    fail_content(file, "is not an IDX file: it starts with bytes " + std::to_string(magic[0]) +
                           ", " + std::to_string(magic[1]) + ", expected 0, 0");
  if (!is_idx_type(magic[2]))
    fail_content(file, "has element type " + idx_type_name(magic[2]) +
                           ", expected one of 0x08, 0x09, 0x0b, 0x0c, 0x0d, 0x0e");
  const std::size_t ndim = magic[3];
  if (ndim < 1 || ndim > k_idx_max_dims)
    fail_content(file, "has " + std::to_string(ndim) + " dimensions, expected 1 to " +
                           std::to_string(k_idx_max_dims));
  IdxHeader header;
  header.type = static_cast<IdxType>(magic[2]);
  header.gzip = source.gzip();
  std::vector<unsigned char> dims(4 * ndim);
  read_header_bytes(source, file, dims.data(), dims.size(), "dimensions");
  std::size_t nonzero = 1;  // product of the non-zero dimensions, bounded below
  bool empty = false;
  for (std::size_t i = 0; i < ndim; ++i) {
    const std::size_t d = (std::size_t{dims[4 * i]} << 24) | (std::size_t{dims[4 * i + 1]} << 16) |
                          (std::size_t{dims[4 * i + 2]} << 8) | std::size_t{dims[4 * i + 3]};
    header.shape.push_back(d);
    if (d == 0) {
      empty = true;
    } else if (nonzero > max_elements / d) {
      nonzero = max_elements + 1;  // remembered as "too many"; no overflow
    } else {
      nonzero *= d;
    }
  }
  if (nonzero > max_elements)
    fail_content(file, "declares shape " + shape_text(header.shape) + ", " +
                           (empty ? "whose non-zero dimensions multiply to" : "that is") +
                           " more than the bound of " + std::to_string(max_elements) + " elements");
  header.size = empty ? 0 : nonzero;
  return header;
}

}  // namespace

std::string idx_type_name(std::uint8_t type) {
  switch (type) {
    case 0x08:
      return "unsigned byte (0x08)";
    case 0x09:
      return "signed byte (0x09)";
    case 0x0B:
      return "int16 (0x0b)";
    case 0x0C:
      return "int32 (0x0c)";
    case 0x0D:
      return "float32 (0x0d)";
    case 0x0E:
      return "float64 (0x0e)";
    default: {
      static constexpr char k_hex[] = "0123456789abcdef";
      return std::string("0x") + k_hex[type >> 4] + k_hex[type & 0xf];
    }
  }
}

IdxHeader read_idx_header(const fs::path& path, std::size_t max_elements) {
  InputFile file = detail::open_regular_file("read_idx_header", "", path);
  ByteSource source(file);
  return parse_header(source, file, max_elements);
}

template <class V>
xt::xarray<V> load_idx(const fs::path& path, std::size_t max_elements) {
  InputFile file = detail::open_regular_file(k_idx_function, "", path);
  ByteSource source(file);
  const IdxHeader header = parse_header(source, file, max_elements);
  if (header.type != idx_type_of<V>())
    fail_content(file, "has element type " + idx_type_name(static_cast<std::uint8_t>(header.type)) +
                           ", expected " +
                           idx_type_name(static_cast<std::uint8_t>(idx_type_of<V>())));
  const std::size_t bytes = header.size * sizeof(V);
  // A raw file must hold exactly the declared data; checked before allocating.
  if (!source.gzip() && source.file_left() != bytes)
    fail_content(file, std::string(source.file_left() < bytes ? "is truncated" : "is too long") +
                           ": shape " + shape_text(header.shape) + " of " +
                           idx_type_name(static_cast<std::uint8_t>(header.type)) + " needs " +
                           std::to_string(bytes) + " data bytes, the file has " +
                           std::to_string(source.file_left()));
  // Decompressed data is collected in chunks that grow with what really
  // arrives, so a small file that declares a large shape costs little memory.
  std::vector<unsigned char> data;
  std::size_t have = 0;
  while (have < bytes) {
    const std::size_t want = std::min(bytes - have, std::max(k_chunk, have));
    data.resize(have + want);
    const std::size_t got = source.read(data.data() + have, want);
    have += got;
    if (got < want)
      fail_content(file, "is truncated: shape " + shape_text(header.shape) + " needs " +
                             std::to_string(bytes) + " data bytes, the file has " +
                             std::to_string(have));
  }
  source.expect_end();
  xt::xarray<V> out = xt::xarray<V>::from_shape(header.shape);
  if constexpr (sizeof(V) == 1) {
    if (bytes > 0) std::memcpy(out.data(), data.data(), bytes);
  } else {
    // Big-endian elements to native order.
    using Word =
        std::conditional_t<sizeof(V) == 2, std::uint16_t,
                           std::conditional_t<sizeof(V) == 4, std::uint32_t, std::uint64_t>>;
    for (std::size_t i = 0; i < header.size; ++i) {
      const unsigned char* p = data.data() + i * sizeof(V);
      Word word = 0;
      for (std::size_t b = 0; b < sizeof(V); ++b) word = static_cast<Word>((word << 8) | p[b]);
      std::memcpy(out.data() + i, &word, sizeof(V));
    }
  }
  return out;
}

template xt::xarray<std::uint8_t> load_idx(const fs::path&, std::size_t);
template xt::xarray<std::int8_t> load_idx(const fs::path&, std::size_t);
template xt::xarray<std::int16_t> load_idx(const fs::path&, std::size_t);
template xt::xarray<std::int32_t> load_idx(const fs::path&, std::size_t);
template xt::xarray<float> load_idx(const fs::path&, std::size_t);
template xt::xarray<double> load_idx(const fs::path&, std::size_t);

}  // namespace xtgrad
