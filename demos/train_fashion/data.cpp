// Loading and checking Fashion-MNIST (data.hpp).

#include "data.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <system_error>
#include <vector>

#include <xtensor/xview.hpp>
#include <xtgrad/data/counter_key.hpp>
#include <xtgrad/engine/errors.hpp>
#include <xtgrad/io/idx.hpp>

#include "zoo/fashion/models.hpp"

namespace fashion {

const char* const k_class_names[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                       "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

namespace {

namespace fs = std::filesystem;

// Neither file of the Debian package is larger than this many elements.
constexpr std::size_t k_max_elements = std::size_t{100'000} * k_pixels;

// `stem`.gz, else `stem`; a DataError naming the package when neither exists.
fs::path find_file(const fs::path& dir, const std::string& stem) {
  std::error_code ignored;
  const fs::path gz = dir / (stem + ".gz"), raw = dir / stem;
  if (fs::exists(gz, ignored)) return gz;
  if (fs::exists(raw, ignored)) return raw;
  throw DataError("cannot find '" + gz.string() + "' (nor '" + raw.string() +
                  "'): the Fashion-MNIST files come with Debian's " + k_data_package +
                  " package; install it with `apt-get install " + k_data_package +
                  "`, or name another directory with --data-dir");
}

template <class V>
xt::xarray<V> read(const fs::path& file) {
  try {
    return xtgrad::load_idx<V>(file, k_max_elements);
  } catch (const std::exception& e) {
    throw DataError(e.what());
  }
}

Split load_split(const fs::path& dir, const std::string& prefix, std::size_t limit) {
  const fs::path image_file = find_file(dir, prefix + "-images-idx3-ubyte");
  const fs::path label_file = find_file(dir, prefix + "-labels-idx1-ubyte");
  xt::xarray<std::uint8_t> images = read<std::uint8_t>(image_file);
  const xt::xarray<std::uint8_t> labels = read<std::uint8_t>(label_file);
  const auto& s = images.shape();
  if (s.size() != 3 || s[1] != k_image_side || s[2] != k_image_side)
    throw DataError("'" + image_file.string() + "' holds images of shape " +
                    xtgrad::detail::shape_str(s) + ", expected [N, 28, 28]");
  if (labels.dimension() != 1 || labels.shape()[0] != s[0])
    throw DataError("'" + label_file.string() + "' holds labels of shape " +
                    xtgrad::detail::shape_str(labels.shape()) + ", expected [" +
                    std::to_string(s[0]) + "], one per image of '" + image_file.string() + "'");
  for (std::size_t i = 0; i < labels.size(); ++i)
    if (labels(i) >= k_classes)
      throw DataError("'" + label_file.string() + "': label " + std::to_string(i) + " is " +
                      std::to_string(labels(i)) + ", expected 0 to 9");
  const std::size_t n = limit == 0 ? s[0] : std::min(limit, s[0]);
  Split split;
  split.raw = xt::view(images, xt::range(0, n));
  split.labels = xtgrad::Indices::from_shape({n});
  for (std::size_t i = 0; i < n; ++i) split.labels(i) = labels(i);
  if (n == 0) throw DataError("'" + image_file.string() + "' holds no images");
  return split;
}

void standardize(Split& split, double mean, double stddev) {
  const std::size_t n = split.raw.shape()[0];
  split.images = xt::xarray<float>::from_shape({n, k_pixels});
  const std::uint8_t* in = split.raw.data();
  float* out = split.images.data();
  for (std::size_t i = 0; i < n * k_pixels; ++i)
    out[i] = static_cast<float>((in[i] / 255.0 - mean) / stddev);
}

}  // namespace

FashionMnist load_fashion_mnist(const fs::path& dir, std::size_t train_limit,
                                std::size_t test_limit) {
  FashionMnist data;
  data.train = load_split(dir, "train", train_limit);
  data.test = load_split(dir, "t10k", test_limit);
  double sum = 0.0, sum_sq = 0.0;
  for (const std::uint8_t byte : data.train.raw) {
    const double v = byte / 255.0;
    sum += v;
    sum_sq += v * v;
  }
  const auto count = static_cast<double>(data.train.raw.size());
  data.mean = sum / count;
  data.stddev = std::sqrt(std::max(sum_sq / count - data.mean * data.mean, 1e-12));
  standardize(data.train, data.mean, data.stddev);
  standardize(data.test, data.mean, data.stddev);
  return data;
}

bool flips(std::uint64_t seed, std::uint64_t epoch, std::size_t index) {
  const std::uint64_t key = xtgrad::counter_key(seed, 0x666c6970ULL, epoch, index);  // "flip"
  return (key >> 63) != 0;
}

void random_flip(xtgrad::Batch<float>& batch, std::uint64_t seed, std::uint64_t epoch) {
  float* image = batch.inputs.data();
  for (std::size_t i = 0; i < batch.indices.size(); ++i, image += k_pixels) {
    if (!flips(seed, epoch, batch.indices[i])) continue;
    for (float* row = image; row != image + k_pixels; row += k_image_side)
      std::reverse(row, row + k_image_side);
  }
}

}  // namespace fashion
