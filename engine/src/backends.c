/*
 * Which compute backends this engine has, and choosing one by name.
 *
 * The CPU backend is linked in.  The CUDA backend is a shared object,
 * privai-cuda.so, that is dlopen()ed the first time a CUDA device is
 * asked for, so the same privai-engine runs on machines without a driver,
 * a GPU or the CUDA libraries: there, asking for CUDA fails with a message
 * naming what is missing.  The control plane asks (privai-engine features)
 * before it places a deployment on GPUs, so a node whose engine cannot
 * drive them is refused up front rather than failing at start.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "privai/compute.h"
#include "privai/status.h"
#include "kernels/backend_new.h"
#include "kernels/cuda/cuda_backend.h"
#include "plugin.h"

static const char *const backends[] = { "cpu", "cuda", NULL };

const char *const *
compute_backends(void)
{
	return backends;
}

/* The library, loaded once and never unloaded (its ops table is used for
 * the life of the process). */
static struct {
	pthread_once_t once;
	int status;
	char err[PRIVAI_ERR_LEN];
	privai_cuda_probe_fn *probe;
	privai_cuda_new_fn *make;
} cuda = { PTHREAD_ONCE_INIT, 0, "", NULL, NULL };

/* Without the driver the backend can do nothing, and loading it maps cuBLAS
 * (over 500 MB): from a cold page cache that took 29 s on a CI machine,
 * past the control plane's wait for `privai-engine features`.  So a missing
 * libcuda.so.1 is found first, at the cost of one dlopen().  A library named
 * in $PRIVAI_CUDA_LIBRARY is loaded as asked: it may bring its own driver. */
static int
cuda_driver_missing(char *err)
{
	if (getenv("PRIVAI_CUDA_LIBRARY") != NULL)
		return 0;
	void *drv = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
	if (drv != NULL) {
		dlclose(drv);
		return 0;
	}
	privai_fail(err, PRIVAI_EUNAVAIL, "no usable NVIDIA driver: libcuda.so.1 is not installed (%s)", dlerror());
	return 1;
}

static void
cuda_load(void)
{
	if (cuda_driver_missing(cuda.err)) {
		cuda.status = PRIVAI_EUNAVAIL;
		return;
	}
	void *h = plugin_open(PRIVAI_CUDA_LIBRARY, "PRIVAI_CUDA_LIBRARY", "its CUDA backend", cuda.err);

	if (h == NULL) {
		cuda.status = PRIVAI_EUNAVAIL;
		return;
	}
	cuda.probe = (privai_cuda_probe_fn *)dlsym(h, PRIVAI_CUDA_PROBE);
	cuda.make = (privai_cuda_new_fn *)dlsym(h, PRIVAI_CUDA_NEW);
	if (cuda.probe == NULL || cuda.make == NULL)
		cuda.status =
			privai_fail(cuda.err, PRIVAI_EUNAVAIL, "%s is not a privai CUDA backend (no %s)",
				    PRIVAI_CUDA_LIBRARY, cuda.probe == NULL ? PRIVAI_CUDA_PROBE : PRIVAI_CUDA_NEW);
}

int
compute_probe(const char *name, char *info, char *err)
{
	if (info != NULL)
		info[0] = '\0';
	if (name == NULL || strcmp(name, "cpu") == 0) {
		if (info != NULL)
			snprintf(info, 128, "%s kernels", compute_cpu_simd_name());
		return PRIVAI_OK;
	}
	if (strcmp(name, "cuda") != 0)
		return privai_fail(err, PRIVAI_EUNSUPPORTED, "no compute backend '%s' (known: cpu, cuda)", name);
	pthread_once(&cuda.once, cuda_load);
	if (cuda.status < 0)
		return privai_fail(err, cuda.status, "%s", cuda.err);
	return cuda.probe(info, err);
}

int
compute_new(const char *name, const struct compute_params *p, struct compute **ret, char *err)
{
	static const struct compute_params defaults = { 0 };
	int r;

	if (p == NULL)
		p = &defaults;
	if (name == NULL || strcmp(name, "cpu") == 0)
		return compute_cpu_new(p, ret, err);
	if ((r = compute_probe(name, NULL, err)) < 0)
		return r;
	return cuda.make(p, ret, err);
}

void
compute_free(struct compute *c)
{
	if (c != NULL)
		c->ops->destroy(c);
}
