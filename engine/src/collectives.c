/*
 * Joining a tensor-parallel group (privai/collective.h).  The transports
 * are plugins: the MPI one links Open MPI and the Gloo one Gloo, which an
 * engine that never runs split need not have.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include "privai/collective.h"
#include "privai/status.h"
#include "plugin.h"

struct transport {
	const char *name, *file, *env, *what, *entry;
	pthread_once_t once;
	char err[PRIVAI_ERR_LEN];
	privai_coll_new_fn *make;
};

static struct transport transports[] = {
	{ "mpi", PRIVAI_MPI_LIBRARY, "PRIVAI_MPI_LIBRARY", "its MPI collectives", PRIVAI_MPI_NEW, PTHREAD_ONCE_INIT, "",
	  NULL },
	{ "gloo", PRIVAI_GLOO_LIBRARY, "PRIVAI_GLOO_LIBRARY", "its Gloo collectives", PRIVAI_GLOO_NEW,
	  PTHREAD_ONCE_INIT, "", NULL },
	{ "nccl", PRIVAI_NCCL_LIBRARY, "PRIVAI_NCCL_LIBRARY", "its NCCL collectives", PRIVAI_NCCL_NEW,
	  PTHREAD_ONCE_INIT, "", NULL },
};

static void
load(struct transport *t)
{
	void *h = plugin_open(t->file, t->env, t->what, t->err);

	if (h != NULL && (t->make = (privai_coll_new_fn *)dlsym(h, t->entry)) == NULL)
		privai_fail(t->err, PRIVAI_EUNAVAIL, "%s is not privai's %s collectives (no %s)", t->file, t->name,
			    t->entry);
}

static void
load_mpi(void)
{
	load(&transports[0]);
}

static void
load_gloo(void)
{
	load(&transports[1]);
}

static void
load_nccl(void)
{
	load(&transports[2]);
}

/* The transport called name, loaded; NULL with err when it cannot be. */
static struct transport *
loaded(const char *name, char *err)
{
	struct transport *t = NULL;

	for (size_t i = 0; name != NULL && i < sizeof(transports) / sizeof(transports[0]); i++)
		if (strcmp(name, transports[i].name) == 0)
			t = &transports[i];
	if (t == NULL) {
		privai_fail(err, PRIVAI_EUNSUPPORTED, "no collectives '%s' (known: mpi, gloo, nccl)",
			    name == NULL ? "(null)" : name);
		return NULL;
	}
	pthread_once(&t->once, t == &transports[0] ? load_mpi : t == &transports[1] ? load_gloo : load_nccl);
	if (t->make == NULL) {
		privai_fail(err, PRIVAI_EUNAVAIL, "%s", t->err);
		return NULL;
	}
	return t;
}

const char *const *
coll_transports(void)
{
	static const char *const names[] = { "mpi", "gloo", "nccl", NULL };

	return names;
}

int
coll_probe(const char *name, char *err)
{
	struct transport *t = loaded(name, err);

	return t != NULL ? PRIVAI_OK
			 : (strcmp(name, "mpi") == 0 || strcmp(name, "gloo") == 0 || strcmp(name, "nccl") == 0
				    ? PRIVAI_EUNAVAIL
				    : PRIVAI_EUNSUPPORTED);
}

int
coll_new(const char *name, const struct coll_params *p, struct coll **ret, char *err)
{
	struct transport *t;

	if (p->size < 1)
		return privai_fail(err, PRIVAI_EINVAL, "a group of %d ranks", p->size);
	if ((t = loaded(name, err)) == NULL)
		return coll_probe(name, NULL);
	return t->make(p, ret, err);
}

void
coll_free(struct coll *g)
{
	if (g != NULL)
		g->ops->destroy(g);
}
