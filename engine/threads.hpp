#pragma once
// The number of threads xtgrad computes with: OpenBLAS's threads inside a
// GEMM, and xtgrad's own pool for the elementwise passes between GEMMs (the
// fused activation and gating passes, bias broadcasts and gradients, the
// optimizers' updates of large parameters). The pool's workers run only
// while OpenBLAS is idle, so that n threads never become 2n.
//
// xtgrad's passes give the same bits at any count: they split only over
// independent elements and rows, a bias gradient is split over columns (each
// summed in row order), and the other sums over rows (norm weights, the
// cross_entropy loss) over groups of rows fixed by the shape. OpenBLAS's
// sgemm is not so: with another thread count it may round its edge tiles
// differently, in the last bit. Its multithreaded GEMM also mallocs its job
// list on every call (OpenBLAS 0.3), the one allocation of a warm step that
// is not xtgrad's.

namespace xtgrad {

// Sets both counts to n (>= 1; std::invalid_argument otherwise), for every
// thread of the process. Call it between steps, not while another thread is
// inside an op.
void set_num_threads(int n);

// The count in use. Until set_num_threads is called: OpenBLAS's own count
// (OPENBLAS_NUM_THREADS, else the number of cores).
int get_num_threads();

}  // namespace xtgrad
