// The BLAS thread count. OpenBLAS keeps one process-wide pool, sized by OPENBLAS_NUM_THREADS or
// the core count. The reference model's matrices are small (d_model ~100), and on a machine whose
// cores are shared with other sluice processes a pool of spinning threads can make a decode step
// several times slower than one thread does, so a process may want to set it to 1 at start-up
// (measured on the 2-core dev box under load: 157 ms vs 19 ms per 32-sequence decode step).
//
// Thread safety: set it at start-up, before any model runs.
#pragma once

namespace sluice::model {

// Sets the BLAS pool to `threads` (at least 1) for the whole process.
void set_blas_threads(int threads);
int blas_threads();

}  // namespace sluice::model
