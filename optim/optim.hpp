#pragma once
// Umbrella header of xtgrad::optim: optimizers (SGD, Adam, AdamW), gradient
// clipping and learning-rate schedules.

#include "adam.hpp"
#include "adamw.hpp"
#include "clip.hpp"
#include "lr_scheduler.hpp"
#include "optimizer.hpp"
#include "sgd.hpp"
