/*
 * Which compute backends this build of the engine has.  The control
 * plane asks (privai-engine features) before it places a deployment on
 * GPUs, so a node whose engine cannot drive them is refused up front
 * rather than failing at start.
 */
#include <stddef.h>
#include <string.h>

#include "privai/compute.h"

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
