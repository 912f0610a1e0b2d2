#pragma once
// Everything in engine/: the tape, the ops and gradcheck.

#include "activation.hpp"
#include "gradcheck.hpp"
#include "indices.hpp"
#include "ops/activations.hpp"
#include "ops/elementwise.hpp"
#include "ops/extrema.hpp"
#include "ops/fused_linear.hpp"
#include "ops/gated.hpp"
#include "ops/linear.hpp"
#include "ops/loss.hpp"
#include "ops/reduce.hpp"
#include "parameter.hpp"
#include "tape.hpp"
