/*
 * The collectives of a tensor-parallel group over Open MPI, between CPU
 * ranks (one per NUMA node or machine) started by mpirun: privai-mpi.so,
 * which the engine loads when --tp asks for a group (collectives.c).
 *
 * Every operation is MPI's own non-blocking collective, completed by a
 * wait that spins briefly and then sleeps, so that a rank waiting for
 * its peers (a follower between a server's steps above all) leaves its
 * CPUs to the threads that compute, and so that a wait can have a
 * deadline.  A rank whose wait inside a step runs past it asks every
 * peer where it is (a point-to-point probe on a communicator of its own,
 * answered from inside any wait) and takes the group down naming the
 * ranks that did not answer: blocking MPI calls would spin forever on a
 * hung peer.  A peer that dies is mpirun's to notice: it names the rank
 * and ends the others.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "privai/collective.h"
#include "privai/status.h"

#define TAG_PROBE 1
#define TAG_REPLY 2
#define SPIN_S 200e-6        /* polling before the first sleep */
#define SLEEP_MAX_NS 1000000 /* 1 ms: an idle follower's latency to a new step */

/* Where a rank is, as a probe's answer says: step number, collective
 * within the step. */
struct where {
	long step, op;
};

struct mpi_group {
	struct coll g;
	MPI_Comm comm, probe_comm;
	double deadline_s;
	struct where at;
	MPI_Request probe_req;
	int probe_in;
	struct where reply;
};

static struct mpi_group *
group_of(struct coll *g)
{
	return (struct mpi_group *)g->impl;
}

static int
mpi_fail(char *err, int rc, const char *what)
{
	char msg[MPI_MAX_ERROR_STRING];
	int len = 0;

	if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
		snprintf(msg, sizeof(msg), "MPI error %d", rc);
	return privai_fail(err, PRIVAI_EIO, "%s failed: %s", what, msg);
}

/* Answer a peer asking where this rank is (see find_missing). */
static void
answer_probes(struct mpi_group *m)
{
	MPI_Status st;
	int done = 0;

	while (MPI_Test(&m->probe_req, &done, &st) == MPI_SUCCESS && done) {
		MPI_Request r;
		m->reply = m->at;
		if (MPI_Isend(&m->reply, 2, MPI_LONG, st.MPI_SOURCE, TAG_REPLY, m->probe_comm, &r) == MPI_SUCCESS)
			MPI_Request_free(&r);
		if (MPI_Irecv(&m->probe_in, 1, MPI_INT, MPI_ANY_SOURCE, TAG_PROBE, m->probe_comm, &m->probe_req) !=
		    MPI_SUCCESS)
			return;
		done = 0;
	}
}

static void
pause_ns(long ns)
{
	struct timespec ts = { 0, ns };

	nanosleep(&ts, NULL);
}

/* Called when a wait of this rank passed the deadline: ask every peer
 * where it is, name those that do not answer, and end the group. */
static void
find_missing(struct mpi_group *m, const char *what, double waited)
{
	int n = m->g.size, me = m->g.rank;
	MPI_Request *req = calloc((size_t)n, sizeof(MPI_Request));
	struct where *ans = calloc((size_t)n, sizeof(*ans));
	int *got = calloc((size_t)n, sizeof(*got));
	char msg[1024];
	size_t len;

	if (req == NULL || ans == NULL || got == NULL)
		m->g.ops->abort(&m->g, 3, "a peer did not answer in time, and there is no memory to ask which");
	double window = m->deadline_s < 10 ? m->deadline_s : 10, t0 = MPI_Wtime();
	for (int p = 0; p < n; p++) {
		MPI_Request s;
		req[p] = MPI_REQUEST_NULL;
		if (p == me)
			continue;
		if (MPI_Isend(&me, 1, MPI_INT, p, TAG_PROBE, m->probe_comm, &s) == MPI_SUCCESS)
			MPI_Request_free(&s);
		MPI_Irecv(&ans[p], 2, MPI_LONG, p, TAG_REPLY, m->probe_comm, &req[p]);
	}
	for (int pending = n - 1; pending > 0 && MPI_Wtime() - t0 < window;) {
		pending = 0;
		for (int p = 0; p < n; p++) {
			if (p == me || got[p])
				continue;
			if (MPI_Test(&req[p], &got[p], MPI_STATUS_IGNORE) != MPI_SUCCESS || !got[p])
				pending++;
		}
		answer_probes(m);
		pause_ns(1000000);
	}
	len = (size_t)snprintf(msg, sizeof(msg), "%s of step %ld waited %.0f s (deadline %.0f s); no answer from rank",
			       what, m->at.step, waited, m->deadline_s);
	for (int p = 0, k = 0; p < n && len < sizeof(msg); p++)
		if (p != me && !got[p])
			len += (size_t)snprintf(msg + len, sizeof(msg) - len, "%s %d", k++ ? "," : "", p);
	for (int p = 0, k = 0; p < n && len < sizeof(msg); p++)
		if (p != me && got[p])
			len += (size_t)snprintf(msg + len, sizeof(msg) - len, "%s rank %d is at step %ld",
						k++ ? "," : "; answered:", p, ans[p].step);
	if (len < sizeof(msg))
		snprintf(msg + len, sizeof(msg) - len, " (hung or dead: the group stops)");
	m->g.ops->abort(&m->g, 3, msg);
}

/* Complete `req`: spin, then sleep in growing steps; past the deadline
 * (when not idle) end the group naming the missing ranks. */
static int
wait_for(struct mpi_group *m, MPI_Request *req, int idle, const char *what, char *err)
{
	double t0 = MPI_Wtime();
	long sleep_ns = 20000;

	for (;;) {
		int done = 0, rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
		if (rc != MPI_SUCCESS)
			return mpi_fail(err, rc, what);
		if (done)
			return PRIVAI_OK;
		answer_probes(m);
		double waited = MPI_Wtime() - t0;
		if (waited < SPIN_S)
			continue;
		if (!idle && waited > m->deadline_s)
			find_missing(m, what, waited);
		pause_ns(sleep_ns);
		if (sleep_ns < SLEEP_MAX_NS)
			sleep_ns *= 2;
	}
}

static int
mpi_allreduce_sum(struct coll *g, float *buf, size_t count, char *err)
{
	struct mpi_group *m = group_of(g);
	MPI_Request req;
	double t0 = MPI_Wtime();
	int rc;

	if (count > (size_t)0x7fffffff)
		return privai_fail(err, PRIVAI_ERANGE, "an all-reduce of %zu values", count);
	m->at.op++;
	if ((rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, m->comm, &req)) != MPI_SUCCESS)
		return mpi_fail(err, rc, "an all-reduce");
	rc = wait_for(m, &req, 0, "an all-reduce", err);
	g->stats.n_allreduce++;
	g->stats.allreduce_bytes += count * sizeof(float);
	g->stats.allreduce_s += MPI_Wtime() - t0;
	return rc;
}

static int
mpi_bcast(struct coll *g, void *buf, size_t bytes, int flags, char *err)
{
	struct mpi_group *m = group_of(g);
	MPI_Request req;
	int rc;

	if (bytes > (size_t)0x7fffffff)
		return privai_fail(err, PRIVAI_ERANGE, "a broadcast of %zu bytes", bytes);
	if ((rc = MPI_Ibcast(buf, (int)bytes, MPI_BYTE, 0, m->comm, &req)) != MPI_SUCCESS)
		return mpi_fail(err, rc, "a broadcast");
	if ((rc = wait_for(m, &req, (flags & COLL_NO_DEADLINE) != 0, "a step's broadcast", err)) < 0)
		return rc;
	/* a step begins with its description */
	if (flags & COLL_STEP_BEGIN) {
		m->at.step++;
		m->at.op = 0;
	}
	g->stats.n_steps++;
	g->stats.step_bytes += bytes;
	return PRIVAI_OK;
}

static int
mpi_gather(struct coll *g, const float *in, const int *counts, float *out, char *err)
{
	struct mpi_group *m = group_of(g);
	int *displs = NULL, rc;
	MPI_Request req;

	if (g->rank == 0) {
		if ((displs = malloc((size_t)g->size * sizeof(int))) == NULL)
			return privai_fail(err, PRIVAI_ENOMEM, "out of memory");
		for (int r = 0, at = 0; r < g->size; r++) {
			displs[r] = at;
			at += counts[r];
		}
	}
	m->at.op++;
	rc = MPI_Igatherv(in, counts[g->rank], MPI_FLOAT, out, counts, displs, MPI_FLOAT, 0, m->comm, &req);
	if (rc != MPI_SUCCESS)
		rc = mpi_fail(err, rc, "a gather of logits");
	else
		rc = wait_for(m, &req, 0, "a gather of logits", err);
	free(displs);
	return rc;
}

static int
mpi_agree(struct coll *g, int ok, char *err)
{
	struct mpi_group *m = group_of(g);
	int all = ok != 0, rc;
	MPI_Request req;

	if ((rc = MPI_Iallreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, m->comm, &req)) != MPI_SUCCESS)
		return mpi_fail(err, rc, "an agreement");
	/* ranks load their shards at their own pace: no deadline */
	if ((rc = wait_for(m, &req, 1, "an agreement", err)) < 0)
		return rc;
	return all;
}

static void
mpi_abort(struct coll *g, int code, const char *why)
{
	if (why != NULL) {
		fprintf(stderr, "privai-engine: rank %d of %d (%s): %s\n", g->rank, g->size, g->host, why);
		fflush(stderr);
	}
	MPI_Abort(MPI_COMM_WORLD, code);
	_Exit(code); /* MPI_Abort does not return; should it, this rank still must not go on */
}

static void
mpi_destroy(struct coll *g)
{
	struct mpi_group *m = group_of(g);

	if (m->probe_req != MPI_REQUEST_NULL) {
		MPI_Cancel(&m->probe_req);
		MPI_Wait(&m->probe_req, MPI_STATUS_IGNORE);
	}
	/* every rank arrives here; a barrier keeps a late probe answer from
	 * reaching a rank that has left */
	MPI_Barrier(m->probe_comm);
	MPI_Comm_free(&m->probe_comm);
	MPI_Comm_free(&m->comm);
	MPI_Finalize();
	free(m);
}

static const struct coll_ops mpi_ops = {
	.name = "mpi",
	.memory = "host",
	.allreduce_sum = mpi_allreduce_sum,
	.bcast = mpi_bcast,
	.gather = mpi_gather,
	.agree = mpi_agree,
	.abort = mpi_abort,
	.destroy = mpi_destroy,
};

int privai_coll_mpi_new(const struct coll_params *p, struct coll **ret, char *err);

int
privai_coll_mpi_new(const struct coll_params *p, struct coll **ret, char *err)
{
	struct mpi_group *m;
	int provided = 0, size = 0, rank = 0, len = 0, rc;
	char host[MPI_MAX_PROCESSOR_NAME];

	if ((rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided)) != MPI_SUCCESS)
		return mpi_fail(err, rc, "starting MPI");
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	/* a server's forward passes run on its scheduler thread */
	if (provided < MPI_THREAD_SERIALIZED) {
		MPI_Finalize();
		return privai_fail(err, PRIVAI_EUNSUPPORTED,
				   "this MPI library gives thread level %d; the engine needs MPI_THREAD_SERIALIZED",
				   provided);
	}
	if (size != p->size) {
		MPI_Finalize();
		return privai_fail(err, PRIVAI_EINVAL,
				   "--tp %d, but the MPI launcher started %d rank%s (run it under mpirun -np %d)",
				   p->size, size, size == 1 ? "" : "s", p->size);
	}
	if ((m = calloc(1, sizeof(*m))) == NULL) {
		MPI_Finalize();
		return privai_fail(err, PRIVAI_ENOMEM, "out of memory");
	}
	m->g.ops = &mpi_ops;
	m->g.rank = rank;
	m->g.size = size;
	m->g.impl = m;
	if (MPI_Get_processor_name(host, &len) != MPI_SUCCESS)
		snprintf(host, sizeof(host), "?");
	snprintf(m->g.host, sizeof(m->g.host), "%.63s", host);
	m->deadline_s = p->deadline_s > 0 ? p->deadline_s : 60;
	m->probe_req = MPI_REQUEST_NULL;
	if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &m->comm)) != MPI_SUCCESS ||
	    (rc = MPI_Comm_dup(MPI_COMM_WORLD, &m->probe_comm)) != MPI_SUCCESS ||
	    (rc = MPI_Irecv(&m->probe_in, 1, MPI_INT, MPI_ANY_SOURCE, TAG_PROBE, m->probe_comm, &m->probe_req)) !=
		    MPI_SUCCESS) {
		mpi_fail(err, rc, "setting up the group");
		free(m);
		MPI_Finalize();
		return PRIVAI_EIO;
	}
	*ret = &m->g;
	return PRIVAI_OK;
}
