#pragma once
// distributed/: data-parallel training over MPI (docs/distributed.md).
#include "broadcast.hpp"
#include "communicator.hpp"
#include "data_parallel.hpp"
#include "gradient_synchronizer.hpp"
#include "sampler.hpp"
#include "sharded_optimizer.hpp"
