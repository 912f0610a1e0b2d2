#pragma once
// distributed/: data-parallel, ZeRO and expert-parallel training over MPI
// (docs/distributed.md).
#include "../data/distributed_sampler.hpp"
#include "broadcast.hpp"
#include "communicator.hpp"
#include "data_parallel.hpp"
#include "expert_parallel.hpp"
#include "gradient_synchronizer.hpp"
#include "sharded_optimizer.hpp"
