// train_fashion's random horizontal flips: which images are mirrored, and how.

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "../../demos/train_fashion/data.hpp"
#include "zoo/fashion/models.hpp"

using fashion::flips;
using fashion::k_image_side;
using fashion::k_pixels;

namespace {

// Image i of the batch: pixel (r, c) holds 1000 * indices[i] + 28 * r + c,
// so every pixel says where it came from.
xtgrad::Batch<float> numbered_batch(const std::vector<std::size_t>& indices) {
  xtgrad::Batch<float> batch;
  batch.indices = indices;
  batch.inputs = xt::xarray<float>::from_shape({indices.size(), k_pixels});
  for (std::size_t i = 0; i < indices.size(); ++i)
    for (std::size_t p = 0; p < k_pixels; ++p)
      batch.inputs(i, p) = static_cast<float>(1000 * indices[i] + p);
  return batch;
}

}  // namespace

TEST_CASE("flips: a fair coin per image, changing with the epoch and the seed") {
  const std::size_t n = 10000;
  std::size_t heads = 0, same_next_epoch = 0, same_other_seed = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const bool coin = flips(7, 3, i);
    heads += coin;
    same_next_epoch += coin == flips(7, 4, i);
    same_other_seed += coin == flips(8, 3, i);
  }
  // Binomial(10000, 1/2) has standard deviation 50: 4 of them either side.
  CHECK(heads > 4800);
  CHECK(heads < 5200);
  CHECK(same_next_epoch > 4800);
  CHECK(same_next_epoch < 5200);
  CHECK(same_other_seed > 4800);
  CHECK(same_other_seed < 5200);
}

TEST_CASE("random_flip mirrors each row of exactly the images flips() names") {
  const std::vector<std::size_t> indices = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 59999};
  xtgrad::Batch<float> batch = numbered_batch(indices);
  fashion::random_flip(batch, 7, 3);
  std::size_t mirrored = 0;
  for (std::size_t i = 0; i < indices.size(); ++i) {
    const bool flipped = flips(7, 3, indices[i]);
    mirrored += flipped;
    for (std::size_t r = 0; r < k_image_side; ++r)
      for (std::size_t c = 0; c < k_image_side; ++c) {
        const std::size_t from = flipped ? k_image_side - 1 - c : c;
        REQUIRE(batch.inputs(i, r * k_image_side + c) ==
                static_cast<float>(1000 * indices[i] + r * k_image_side + from));
      }
  }
  // Both branches were seen (else the check above proves half as much).
  CHECK(mirrored > 0);
  CHECK(mirrored < indices.size());
}

TEST_CASE("random_flip depends on the image's index, not its place in the batch") {
  xtgrad::Batch<float> forward = numbered_batch({11, 12, 13, 14, 15, 16});
  xtgrad::Batch<float> backward = numbered_batch({16, 15, 14, 13, 12, 11});
  fashion::random_flip(forward, 0, 0);
  fashion::random_flip(backward, 0, 0);
  for (std::size_t i = 0; i < 6; ++i)
    for (std::size_t p = 0; p < k_pixels; ++p)
      REQUIRE(forward.inputs(i, p) == backward.inputs(5 - i, p));
}
