#pragma once
// Umbrella header of xtgrad::optim: optimizers (SGD, Adam, AdamW) with
// parameter groups and state dicts, gradient clipping and learning-rate
// schedules. Saving a run's state to disk: training/training_state.hpp.

#include "adam.hpp"
#include "adamw.hpp"
#include "clip.hpp"
#include "lr_scheduler.hpp"
#include "optimizer.hpp"
#include "sgd.hpp"
