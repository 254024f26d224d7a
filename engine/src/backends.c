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
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "privai/compute.h"
#include "privai/status.h"
#include "kernels/backend_new.h"
#include "kernels/cuda/cuda_backend.h"

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

/* Where privai-cuda.so may be: $PRIVAI_CUDA_LIBRARY, beside the binary
 * (a build tree), or in ../lib/privai (the installed layout). */
static int
cuda_library_path(int i, char *buf, size_t len)
{
	char exe[PATH_MAX];
	const char *env = getenv("PRIVAI_CUDA_LIBRARY");
	ssize_t n;
	int w;

	if (i == 0)
		return env != NULL && env[0] != '\0' ? snprintf(buf, len, "%s", env) < (int)len : 0;
	if ((n = readlink("/proc/self/exe", exe, sizeof(exe) - 1)) <= 0)
		return 0;
	exe[n] = '\0';
	char *slash = strrchr(exe, '/');
	if (slash == NULL)
		return 0;
	*slash = '\0';
	if (i == 1)
		w = snprintf(buf, len, "%s/%s", exe, PRIVAI_CUDA_LIBRARY);
	else if (i == 2)
		w = snprintf(buf, len, "%s/../lib/privai/%s", exe, PRIVAI_CUDA_LIBRARY);
	else
		return 0;
	return w > 0 && (size_t)w < len;
}

static void
cuda_load(void)
{
	char path[PATH_MAX + 64], tried[PRIVAI_ERR_LEN / 2] = "";
	void *h = NULL;
	int i;

	for (i = 0; i < 3 && h == NULL; i++) {
		if (!cuda_library_path(i, path, sizeof(path)))
			continue;
		if (access(path, F_OK) != 0) {
			size_t used = strlen(tried);
			snprintf(tried + used, sizeof(tried) - used, "%s%.200s", used ? ", " : "", path);
			if (i == 0)
				break; /* a path named by hand that is not there: say so, do not look elsewhere */
			continue;
		}
		if ((h = dlopen(path, RTLD_NOW | RTLD_LOCAL)) == NULL) {
			/* there but unloadable: usually a CUDA library it needs (libcublas) */
			cuda.status = privai_fail(cuda.err, PRIVAI_EUNAVAIL, "the CUDA backend cannot be loaded: %s",
						  dlerror());
			return;
		}
	}
	if (h == NULL) {
		cuda.status =
			privai_fail(cuda.err, PRIVAI_EUNAVAIL,
				    "this privai-engine was installed without its CUDA backend (%s not found: %s)",
				    PRIVAI_CUDA_LIBRARY, tried);
		return;
	}
	cuda.probe = (privai_cuda_probe_fn *)dlsym(h, PRIVAI_CUDA_PROBE);
	cuda.make = (privai_cuda_new_fn *)dlsym(h, PRIVAI_CUDA_NEW);
	if (cuda.probe == NULL || cuda.make == NULL)
		cuda.status = privai_fail(cuda.err, PRIVAI_EUNAVAIL, "%s is not a privai CUDA backend (no %s)", path,
					  cuda.probe == NULL ? PRIVAI_CUDA_PROBE : PRIVAI_CUDA_NEW);
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
