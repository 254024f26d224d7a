/*
 * The CUDA backend's entry points, as privai-cuda.so exports them.  The
 * engine never links against CUDA: backends.c dlopen()s the library the
 * first time a CUDA device is asked for, so one privai-engine binary runs
 * on machines with no driver, no GPU and no CUDA libraries.
 */
#ifndef PRIVAI_KERNELS_CUDA_BACKEND_H
#define PRIVAI_KERNELS_CUDA_BACKEND_H

#include "privai/compute.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether a CUDA device can be used here: PRIVAI_OK, or PRIVAI_EUNAVAIL
 * with err naming what is missing (the driver, a device).  Names the
 * device in `info` (at least 128 bytes) when there is one. */
typedef int privai_cuda_probe_fn(char *info, char *err);
/* A backend on the first visible device (CUDA_VISIBLE_DEVICES picks a
 * GPU or one MIG instance by UUID). */
typedef int privai_cuda_new_fn(const struct compute_params *p, struct compute **ret, char *err);

#define PRIVAI_CUDA_LIBRARY "privai-cuda.so"
#define PRIVAI_CUDA_PROBE "privai_cuda_probe"
#define PRIVAI_CUDA_NEW "privai_cuda_new"

privai_cuda_probe_fn privai_cuda_probe;
privai_cuda_new_fn privai_cuda_new;

#ifdef __cplusplus
}
#endif

#endif
