/*
 * Constructors of the compute backends, for compute_new() (backends.c)
 * only: callers choose a backend by name.
 */
#ifndef PRIVAI_KERNELS_BACKEND_NEW_H
#define PRIVAI_KERNELS_BACKEND_NEW_H

#include "privai/compute.h"

int compute_cpu_new(const struct compute_params *p, struct compute **ret, char *err);

#endif
