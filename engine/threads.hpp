#pragma once
// The number of threads xtgrad computes with: OpenBLAS's threads inside a
// GEMM, and xtgrad's own pool for the elementwise passes between GEMMs (the
// fused activation and gating passes, bias broadcasts and gradients, the
// optimizers' updates of large parameters). The pool's workers run only
// while OpenBLAS is idle, so that n threads never become 2n.
//
// Results do not depend on the count: the passes split only over independent
// elements, and a sum over rows (a bias gradient) is split over columns, each
// column summed in the same order as on one thread.

namespace xtgrad {

// Sets both counts to n (>= 1; std::invalid_argument otherwise), for every
// thread of the process. Call it between steps, not while another thread is
// inside an op.
void set_num_threads(int n);

// The count in use. Until set_num_threads is called: OpenBLAS's own count
// (OPENBLAS_NUM_THREADS, else the number of cores).
int get_num_threads();

}  // namespace xtgrad
