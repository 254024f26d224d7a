/*
 * Joining a tensor-parallel group (privai/collective.h).  The transports
 * are plugins: the MPI one links Open MPI, which an engine that never
 * runs split need not have.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include "privai/collective.h"
#include "privai/status.h"
#include "plugin.h"

static struct {
	pthread_once_t once;
	char err[PRIVAI_ERR_LEN];
	privai_coll_new_fn *make;
} mpi = { PTHREAD_ONCE_INIT, "", NULL };

static void
mpi_load(void)
{
	void *h = plugin_open(PRIVAI_MPI_LIBRARY, "PRIVAI_MPI_LIBRARY", "its MPI collectives", mpi.err);

	if (h != NULL && (mpi.make = (privai_coll_new_fn *)dlsym(h, PRIVAI_MPI_NEW)) == NULL)
		privai_fail(mpi.err, PRIVAI_EUNAVAIL, "%s is not privai's MPI collectives (no %s)", PRIVAI_MPI_LIBRARY,
			    PRIVAI_MPI_NEW);
}

int
coll_new(const char *name, const struct coll_params *p, struct coll **ret, char *err)
{
	if (p->size < 1)
		return privai_fail(err, PRIVAI_EINVAL, "a group of %d ranks", p->size);
	if (name == NULL || strcmp(name, "mpi") != 0)
		return privai_fail(err, PRIVAI_EUNSUPPORTED, "no collectives '%s' (known: mpi)",
				   name == NULL ? "(null)" : name);
	pthread_once(&mpi.once, mpi_load);
	if (mpi.make == NULL)
		return privai_fail(err, PRIVAI_EUNAVAIL, "%s", mpi.err);
	return mpi.make(p, ret, err);
}

void
coll_free(struct coll *g)
{
	if (g != NULL)
		g->ops->destroy(g);
}
