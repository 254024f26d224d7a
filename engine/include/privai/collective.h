/*
 * The collectives of a tensor-parallel group, behind one small interface.
 *
 * A model split over N ranks (privai/model.h: engine_ctx_params.group)
 * needs four things from the ranks' transport: a sum of every rank's
 * partial activations after each row-parallel matmul, rank 0's step
 * description sent to the others, the ranks' slices of the logits
 * brought to rank 0, and an agreement that every rank is ready.  Open MPI
 * provides them between CPU ranks (privai-mpi.so, loaded by coll_new());
 * NCCL between GPUs.  No transport is written here.
 *
 * A group that cannot go on (a peer dead or hung past the deadline) is
 * taken down as a whole by the implementation, with one line on stderr
 * naming the rank that failed to answer: a rank that returned an error
 * instead would leave its peers waiting for it forever.
 */
#ifndef PRIVAI_COLLECTIVE_H
#define PRIVAI_COLLECTIVE_H

#include <stddef.h>
#include <stdint.h>

/* What a group has spent on all-reduces since it started (rank-local). */
struct coll_stats {
	uint64_t n_allreduce;     /* calls */
	uint64_t allreduce_bytes; /* bytes each rank contributed */
	double allreduce_s;       /* wall time inside them, waiting for slower peers included */
	uint64_t n_steps;         /* step descriptions sent or received */
	uint64_t step_bytes;
};

struct coll;

enum coll_bcast_flags { COLL_STEP_BEGIN = 1, COLL_NO_DEADLINE = 2 };

struct coll_ops {
	const char *name;   /* "mpi", "nccl" */
	const char *memory; /* where allreduce_sum's buffer lives: "host" or "cuda" */
	/* buf[i] = the sum over ranks of every rank's buf[i], in place;
	 * count floats.  Bounded by the group's deadline. */
	int (*allreduce_sum)(struct coll *g, float *buf, size_t count, char *err);
	/* rank 0's `bytes` at buf, copied to every rank's buf (host memory).
	 * flags: COLL_STEP_BEGIN on a step's first message (steps are
	 * counted there, for messages), COLL_NO_DEADLINE where a follower
	 * waits for the next step as long as the server has nothing to do. */
	int (*bcast)(struct coll *g, void *buf, size_t bytes, int flags, char *err);
	/* each rank's counts[rank] floats at `in`, concatenated in rank order
	 * into rank 0's `out` (host memory; others may pass NULL). */
	int (*gather)(struct coll *g, const float *in, const int *counts, float *out, char *err);
	/* 1 when every rank passed ok != 0, 0 when one did not; a negative
	 * status when the group failed. */
	int (*agree)(struct coll *g, int ok, char *err);
	/* Take the whole group down now (every rank exits with `code`),
	 * after `why` (may be NULL) is written on stderr naming this rank. */
	void (*abort)(struct coll *g, int code, const char *why);
	void (*destroy)(struct coll *g);
};

struct coll {
	const struct coll_ops *ops;
	int rank, size;
	char host[64]; /* this rank's machine, for messages */
	struct coll_stats stats;
	void *impl;
};

struct coll_params {
	int size;          /* ranks the caller expects (--tp); the transport must agree */
	double deadline_s; /* longest wait for a peer inside a step; 0: 60 */
	/* gloo: where the ranks meet (HOST:PORT, rank 0 listens there), this
	 * process's rank, and how long the others may take to come (0: 300 s);
	 * mpi: the launcher says (NULL, 0, 0) */
	const char *init;
	int rank;
	double join_s;
};

/* Join the group of transport `name`: "mpi" (ranks mpirun started),
 * "gloo" (CPU ranks started apart, meeting at p->init) or "nccl" (GPU
 * ranks, one a process, meeting there too).  PRIVAI_OK,
 * PRIVAI_EUNAVAIL when its library cannot be loaded (err names it) or
 * the others do not come, PRIVAI_EINVAL when the transport started a
 * different number of ranks than p->size. */
int coll_new(const char *name, const struct coll_params *p, struct coll **ret, char *err);
/* Whether transport `name` can be loaded here (its plugin and the
 * libraries it needs), without joining anything: PRIVAI_OK, or
 * coll_new()'s error for a missing one. */
int coll_probe(const char *name, char *err);
/* The transports this engine knows, NULL-terminated ("mpi", "gloo", "nccl"). */
const char *const *coll_transports(void);

/* Leave the group (every rank must); NULL is allowed. */
void coll_free(struct coll *g);

/* The plugins' entry points, as privai-mpi.so and privai-gloo.so export them. */
typedef int privai_coll_new_fn(const struct coll_params *p, struct coll **ret, char *err);
#define PRIVAI_MPI_LIBRARY "privai-mpi.so"
#define PRIVAI_MPI_NEW "privai_coll_mpi_new"
#define PRIVAI_GLOO_LIBRARY "privai-gloo.so"
#define PRIVAI_GLOO_NEW "privai_coll_gloo_new"
#define PRIVAI_NCCL_LIBRARY "privai-nccl.so"
#define PRIVAI_NCCL_NEW "privai_coll_nccl_new"

#endif
