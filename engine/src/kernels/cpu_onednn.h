/*
 * oneDNN's bfloat16 matmul for the CPU backend's BF16 prefill, where it
 * beats our own GEMM (docs/performance.md).  The library (libdnnl.so.2,
 * Debian's libdnnl2) is loaded on first use, so an engine without it still
 * runs, on its own kernels.
 */
#ifndef PRIVAI_CPU_ONEDNN_H
#define PRIVAI_CPU_ONEDNN_H

#include <stdint.h>

/* Fewest tokens for which the matmul goes to oneDNN: below this our own
 * dots win (measured, docs/performance.md). */
#define ONEDNN_MIN_TOKENS 3

/* The implementation oneDNN runs a bfloat16 matmul with on this CPU
 * ("brg:avx512_core_bf16", or with AMX "brg:avx512_core_amx"), or NULL
 * when it cannot be used: PRIVAI_ONEDNN=0, no libdnnl.so.2, or nothing
 * better than oneDNN's reference code.  cpu_onednn_status() says which. */
const char *cpu_onednn_bf16(void);

/* PRIVAI_ONEDNN=1: use oneDNN even where our own kernels win (for
 * measuring one against the other); unset: only where it wins. */
int cpu_onednn_forced(void);

/* One line for `features`: the library's version and the implementation,
 * or why oneDNN is not used. */
const char *cpu_onednn_status(void);

/* y[n x rows] = x[n x cols] * w[rows x cols]^T, x and w bfloat16 and row
 * major, y float, on n_threads OpenMP threads.  Only after
 * cpu_onednn_bf16() returned non-NULL.  Returns 0, or -1 when oneDNN
 * refused the shape (the caller then multiplies on its own kernels). */
int cpu_onednn_matmul_bf16(const uint16_t *w, int64_t rows, int64_t cols, const uint16_t *x, int n, float *y,
			   int n_threads);

#endif
