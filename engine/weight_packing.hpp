#pragma once
// Packed weights: whether float GEMMs read a Parameter's value from a copy in
// oneDNN's preferred blocked layout, made once per value and kept until the
// value changes (engine/kernels/onednn_packed_weights.hpp), instead of letting
// oneDNN copy the strided array into that layout on every call. Off by
// default. On, the same products cost 2-35 % less (docs/performance.md) and
// give the same bits.
//
// Off by default because a copy is keyed by the Parameter's version
// (parameter.hpp), which xtgrad bumps at every write it makes (optimizer
// steps, load_state_dict and load, resume, LoRA merges, ...) but cannot see
// when a user writes `p.value` directly (p.value += 1, p.value = other of the
// same shape, a view, a raw pointer): with packing on, such a write must be
// followed by p.mark_changed() (or made through p.set_value), else the next
// forward may read the old value. This is the contract of torch's weight
// prepacking too (torch.jit.freeze, ipex.optimize: opt-in, weights frozen
// or written through the framework). A training loop that writes weights only
// through xtgrad's optimizers and loaders can turn it on safely.
//
// Process-wide; takes effect at the next GEMM. Without oneDNN in the build it
// changes nothing.

namespace xtgrad {

void set_weight_packing(bool on);

// Whether packing is on (false until set).
bool weight_packing();

}  // namespace xtgrad
