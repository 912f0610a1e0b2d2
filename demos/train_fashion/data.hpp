#pragma once
// Fashion-MNIST (Xiao, Rasul & Vollgraf 2017) as Debian's dataset-fashion-mnist
// package installs it: /usr/share/datasets/fashion-mnist/
// {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz, 60,000 training and
// 10,000 test images of 28 x 28 unsigned bytes with labels 0 to 9. Each file
// is read through xtgrad::load_idx (gzip through zlib; a raw file without
// ".gz" is taken when the compressed one is absent).

#include <cstddef>
#include <filesystem>
#include <string>

#include <cstdint>

#include <xtensor/xarray.hpp>
#include <xtgrad/data/batcher.hpp>
#include <xtgrad/engine/indices.hpp>

#include "../common/program.hpp"

namespace fashion {

inline constexpr const char* k_default_data_dir = "/usr/share/datasets/fashion-mnist";
inline constexpr const char* k_data_package = "dataset-fashion-mnist";

// The names of the ten classes, in label order.
extern const char* const k_class_names[10];

// The data could not be used: missing, malformed or inconsistent files. The
// message names the file and what is wrong (and, for a missing file, the
// package and its install command).
using demos::DataError;

struct Split {
  xt::xarray<float> images;      // [N, 784], standardized as below
  xt::xarray<std::uint8_t> raw;  // [N, 28, 28], the bytes of the file
  xtgrad::Indices labels;        // [N], in [0, 10)
};

struct FashionMnist {
  Split train, test;
  double mean = 0.0, stddev = 1.0;  // of the training pixels / 255, used for both splits
};

// Reads both splits from `dir`, keeping the first `train_limit` and
// `test_limit` examples (0: all). Pixels become (byte / 255 - mean) / stddev
// with the mean and standard deviation of the training pixels kept.
FashionMnist load_fashion_mnist(const std::filesystem::path& dir, std::size_t train_limit,
                                std::size_t test_limit);

// Random horizontal flips, the usual augmentation for Fashion-MNIST (a
// mirrored shirt is a shirt): mirrors each image of `batch` ([B, 784])
// left to right with probability 1/2. The coin of an image is a hash of
// (seed, epoch, the image's index in the training set), so it depends
// neither on the batch size nor on the order of the batches, and a resumed
// run draws the same coins.
void random_flip(xtgrad::Batch<float>& batch, std::uint64_t seed, std::uint64_t epoch);

// Whether random_flip mirrors training image `index` in `epoch`.
bool flips(std::uint64_t seed, std::uint64_t epoch, std::size_t index);

}  // namespace fashion
