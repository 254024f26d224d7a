/*
 * Which compute backends this build of the engine has.  The control
 * plane asks (privai-engine features) before it places a deployment on
 * GPUs, so a node whose engine cannot drive them is refused up front
 * rather than failing at start.
 */
#include <stddef.h>
#include <string.h>

#include "privai/compute.h"
#include "privai/status.h"
#include "kernels/backend_new.h"

static const char *const backends[] = {
	"cpu",
#ifdef PRIVAI_WITH_CUDA
	"cuda",
#endif
	NULL,
};

const char *const *
compute_backends(void)
{
	return backends;
}

int
compute_has_backend(const char *name)
{
	for (const char *const *b = backends; *b != NULL; b++)
		if (strcmp(*b, name) == 0)
			return 1;
	return 0;
}

int
compute_new(const char *name, const struct compute_params *p, struct compute **ret, char *err)
{
	static const struct compute_params defaults = { 0 };

	if (p == NULL)
		p = &defaults;
	if (name == NULL || strcmp(name, "cpu") == 0)
		return compute_cpu_new(p, ret, err);
	if (!compute_has_backend(name))
		return privai_fail(err, PRIVAI_EUNSUPPORTED, "no compute backend '%s' in this build (it has: %s)", name,
				   backends[1] != NULL ? "cpu, cuda" : "cpu");
	return privai_fail(err, PRIVAI_EUNSUPPORTED, "the '%s' backend is listed but not built", name);
}

void
compute_free(struct compute *c)
{
	if (c != NULL)
		c->ops->destroy(c);
}
