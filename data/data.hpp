#pragma once
// Everything in data/: mini-batches of an in-memory data set. Batcher
// (batcher.hpp), one process's seeded shuffle, and DistributedSampler
// (distributed_sampler.hpp), one rank's slice of the same global batches.

#include "batcher.hpp"
#include "distributed_sampler.hpp"
