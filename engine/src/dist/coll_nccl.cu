/*
 * The collectives of a tensor-parallel group of GPUs over NCCL: one
 * process a GPU (its --gpus makes it device 0), started apart (each node's
 * privai-admin starts its own ranks) and meeting at --dist-init, where
 * rank 0's rendezvous store hands every rank NCCL's unique id.  NCCL
 * then finds its own paths: NVLink inside a node, InfiniBand/RoCE with
 * GPUDirect across nodes through its network plugins, honouring
 * NCCL_TOPO_FILE and the NCCL_IB_* settings privai-fabric writes.
 * privai-nccl.so, loaded by coll_new("nccl").
 *
 * The all-reduce works on the CUDA backend's activations in device memory;
 * the step broadcast, the logits gather and the agreement move host bytes
 * through a device buffer of this plugin's own.  The backend queues its
 * kernels on a stream NCCL does not know, so each collective first waits
 * for the device (cudaDeviceSynchronize): correct, not yet overlapped.
 *
 * The communicator is non-blocking (ncclConfig_t.blocking = 0), so every
 * wait is this plugin's own: it polls, sleeps when long, and past the
 * deadline (or on NCCL's asynchronous error) names the ranks that did not
 * answer through the rendezvous store, aborts the communicator and ends
 * the process, as the Gloo transport does.
 *
 * Built here without a GPU; what a lent GPU has exercised is in
 * docs/performance.md and the issue's notes.
 */
#include <cuda_runtime.h>
#include <nccl.h>
#include <time.h>

#include <memory>

#include "dist/rendezvous.h"

extern "C" {
#include "privai/collective.h"
}

namespace {

using privai_dist::StoreClient;
using privai_dist::StoreServer;

struct NcclGroup {
	struct coll g;
	std::unique_ptr<StoreServer> server;
	std::unique_ptr<StoreClient> store;
	ncclComm_t comm = nullptr;
	cudaStream_t stream = nullptr;
	double deadline_s = 60;
	long step = 0;
	void *scratch = nullptr; /* device memory for the host collectives */
	size_t scratch_bytes = 0;
	std::vector<float> pad;
};

NcclGroup *
group_of(struct coll *g)
{
	return static_cast<NcclGroup *>(g->impl);
}

[[noreturn]] void
nccl_abort(struct coll *g, int code, const char *why)
{
	NcclGroup *G = group_of(g);

	if (why != nullptr) {
		fprintf(stderr, "privai-engine: rank %d of %d (%s): %s\n", g->rank, g->size, g->host, why);
		fflush(stderr);
	}
	if (G->comm != nullptr)
		ncclCommAbort(G->comm);
	_exit(code);
}

[[noreturn]] void
group_failed(NcclGroup *G, const char *what, const char *cause)
{
	nccl_abort(&G->g, 3,
		   privai_dist::failure_message(*G->store, what, G->step, cause, G->g.rank, G->g.size).c_str());
}

double
now_s()
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Wait for the stream's work: poll 200 us, then sleep in growing steps;
 * an NCCL error, or the deadline when not idle, ends the group. */
void
wait_stream(NcclGroup *G, int idle, const char *what)
{
	double t0 = now_s();
	long sleep_ns = 20000;

	for (;;) {
		cudaError_t c = cudaStreamQuery(G->stream);
		if (c == cudaSuccess)
			return;
		if (c != cudaErrorNotReady)
			group_failed(G, what, cudaGetErrorString(c));
		ncclResult_t async = ncclSuccess;
		if (ncclCommGetAsyncError(G->comm, &async) != ncclSuccess ||
		    (async != ncclSuccess && async != ncclInProgress))
			group_failed(G, what, ncclGetErrorString(async));
		double waited = now_s() - t0;
		if (waited < 200e-6)
			continue;
		if (!idle && waited > G->deadline_s) {
			char why[64];
			snprintf(why, sizeof(why), "waited %.0f s, deadline %.0f s", waited, G->deadline_s);
			group_failed(G, what, why);
		}
		struct timespec ts = { 0, sleep_ns };
		nanosleep(&ts, nullptr);
		if (sleep_ns < 1000000)
			sleep_ns *= 2;
	}
}

/* An NCCL call's own result: ncclInProgress is a queued operation on a
 * non-blocking communicator. */
void
check(NcclGroup *G, ncclResult_t r, const char *what)
{
	if (r != ncclSuccess && r != ncclInProgress)
		group_failed(G, what, ncclGetErrorString(r));
}

int
reserve_scratch(NcclGroup *G, size_t bytes, char *err)
{
	if (bytes <= G->scratch_bytes)
		return PRIVAI_OK;
	if (G->scratch != nullptr)
		cudaFree(G->scratch);
	G->scratch = nullptr;
	G->scratch_bytes = 0;
	if (cudaMalloc(&G->scratch, bytes) != cudaSuccess)
		return privai_fail(err, PRIVAI_ENOMEM, "no device memory for %zu bytes of a collective", bytes);
	G->scratch_bytes = bytes;
	return PRIVAI_OK;
}

int
nccl_allreduce_sum(struct coll *g, float *buf, size_t count, char *)
{
	NcclGroup *G = group_of(g);
	double t0 = now_s();

	if (cudaDeviceSynchronize() != cudaSuccess) /* the backend's kernels wrote buf on its own stream */
		group_failed(G, "an all-reduce", "the device failed before it");
	check(G, ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, G->comm, G->stream), "an all-reduce");
	wait_stream(G, 0, "an all-reduce");
	g->stats.n_allreduce++;
	g->stats.allreduce_bytes += count * sizeof(float);
	g->stats.allreduce_s += now_s() - t0;
	return PRIVAI_OK;
}

int
nccl_bcast(struct coll *g, void *buf, size_t bytes, int flags, char *err)
{
	NcclGroup *G = group_of(g);
	int r;

	if ((r = reserve_scratch(G, bytes, err)) < 0)
		return r;
	if (g->rank == 0 && cudaMemcpy(G->scratch, buf, bytes, cudaMemcpyHostToDevice) != cudaSuccess)
		group_failed(G, "a step's broadcast", "a copy to the device failed");
	check(G, ncclBroadcast(G->scratch, G->scratch, bytes, ncclUint8, 0, G->comm, G->stream), "a step's broadcast");
	wait_stream(G, (flags & COLL_NO_DEADLINE) != 0, "a step's broadcast");
	if (g->rank != 0 && cudaMemcpy(buf, G->scratch, bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
		group_failed(G, "a step's broadcast", "a copy from the device failed");
	if (flags & COLL_STEP_BEGIN)
		G->step++;
	g->stats.n_steps++;
	g->stats.step_bytes += bytes;
	return PRIVAI_OK;
}

/* NCCL has no gather: every rank sends the largest count, padded, in an
 * all-gather, and rank 0 keeps what it needs. */
int
nccl_gather(struct coll *g, const float *in, const int *counts, float *out, char *err)
{
	NcclGroup *G = group_of(g);
	size_t most = privai_dist::largest(counts, g->size);
	int r;

	size_t each = most * sizeof(float);
	if ((r = reserve_scratch(G, each * (size_t)(g->size + 1), err)) < 0)
		return r;
	float *mine = static_cast<float *>(G->scratch), *all = mine + most;
	if (cudaMemset(mine, 0, each) != cudaSuccess ||
	    cudaMemcpy(mine, in, (size_t)counts[g->rank] * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess)
		group_failed(G, "a gather of logits", "a copy to the device failed");
	check(G, ncclAllGather(mine, all, most, ncclFloat, G->comm, G->stream), "a gather of logits");
	wait_stream(G, 0, "a gather of logits");
	if (g->rank != 0)
		return PRIVAI_OK;
	try {
		G->pad.resize(most * (size_t)g->size);
	} catch (const std::bad_alloc &) {
		return privai_fail(err, PRIVAI_ENOMEM, "out of memory for a gather of %zu values", most);
	}
	if (cudaMemcpy(G->pad.data(), all, each * (size_t)g->size, cudaMemcpyDeviceToHost) != cudaSuccess)
		group_failed(G, "a gather of logits", "a copy from the device failed");
	privai_dist::unpad(G->pad.data(), most, counts, g->size, out);
	return PRIVAI_OK;
}

int
nccl_agree(struct coll *g, int ok, char *err)
{
	NcclGroup *G = group_of(g);
	int all = ok != 0, r;

	if ((r = reserve_scratch(G, sizeof(int), err)) < 0)
		return r;
	if (cudaMemcpy(G->scratch, &all, sizeof(int), cudaMemcpyHostToDevice) != cudaSuccess)
		group_failed(G, "an agreement", "a copy to the device failed");
	check(G, ncclAllReduce(G->scratch, G->scratch, 1, ncclInt32, ncclMin, G->comm, G->stream), "an agreement");
	wait_stream(G, 1, "an agreement"); /* ranks load their parts at their own pace */
	if (cudaMemcpy(&all, G->scratch, sizeof(int), cudaMemcpyDeviceToHost) != cudaSuccess)
		group_failed(G, "an agreement", "a copy from the device failed");
	return all;
}

void
nccl_destroy(struct coll *g)
{
	NcclGroup *G = group_of(g);

	if (G->comm != nullptr)
		ncclCommDestroy(G->comm);
	if (G->scratch != nullptr)
		cudaFree(G->scratch);
	if (G->stream != nullptr)
		cudaStreamDestroy(G->stream);
	delete G;
}

const struct coll_ops nccl_ops = {
	"nccl", "cuda", nccl_allreduce_sum, nccl_bcast, nccl_gather, nccl_agree, nccl_abort, nccl_destroy,
};

/* Wait for a non-blocking communicator to finish initialising. */
int
init_done(NcclGroup *G, double patience_s, char *err)
{
	double t0 = now_s();
	ncclResult_t st = ncclInProgress;

	while (st == ncclInProgress) {
		if (ncclCommGetAsyncError(G->comm, &st) != ncclSuccess)
			break;
		if (st == ncclInProgress && now_s() - t0 > patience_s)
			return privai_fail(err, PRIVAI_EUNAVAIL, "NCCL did not join the %d ranks within %.0f s",
					   G->g.size, patience_s);
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, nullptr);
	}
	if (st != ncclSuccess)
		return privai_fail(err, PRIVAI_EIO, "NCCL cannot join rank %d of %d: %s", G->g.rank, G->g.size,
				   ncclGetErrorString(st));
	return PRIVAI_OK;
}

} // namespace

extern "C" int privai_coll_nccl_new(const struct coll_params *p, struct coll **ret, char *err);

extern "C" int
privai_coll_nccl_new(const struct coll_params *p, struct coll **ret, char *err)
{
	struct sockaddr_storage a = {};
	socklen_t len = 0;
	double join = p->join_s > 0 ? p->join_s : 300;
	int r;

	if (p->init == nullptr || p->rank < 0 || p->rank >= p->size)
		return privai_fail(err, PRIVAI_EINVAL, "GPU ranks meet at --dist-init HOST:PORT (rank %d of %d)",
				   p->rank, p->size);
	if ((r = privai_dist::resolve(p->init, &a, &len, err)) < 0)
		return r;
	std::unique_ptr<NcclGroup> G(new (std::nothrow) NcclGroup());
	if (!G)
		return privai_fail(err, PRIVAI_ENOMEM, "out of memory");
	G->g.ops = &nccl_ops;
	G->g.rank = p->rank;
	G->g.size = p->size;
	G->g.impl = G.get();
	gethostname(G->g.host, sizeof(G->g.host) - 1);
	G->deadline_s = p->deadline_s > 0 ? p->deadline_s : 60;
	cudaError_t ce = cudaSetDevice(0);
	if (ce == cudaSuccess)
		ce = cudaStreamCreateWithFlags(&G->stream, cudaStreamNonBlocking);
	if (ce != cudaSuccess)
		return privai_fail(err, PRIVAI_EUNAVAIL, "rank %d has no usable CUDA device: %s", p->rank,
				   cudaGetErrorString(ce));
	try {
		if (p->rank == 0) {
			G->server.reset(new StoreServer());
			if ((r = G->server->listen_on(a, len, err)) < 0)
				return r;
		}
		G->store.reset(new StoreClient());
		if ((r = G->store->connect_to(a, len, join, err)) < 0)
			return r;
		ncclUniqueId id;
		if (p->rank == 0) {
			if (ncclGetUniqueId(&id) != ncclSuccess)
				return privai_fail(err, PRIVAI_EUNAVAIL,
						   "NCCL cannot make a unique id (no usable network?)");
			G->store->set("nccl-id", std::vector<char>((char *)&id, (char *)&id + sizeof(id)));
		} else {
			std::vector<char> v = G->store->get("nccl-id");
			if (v.size() != sizeof(id))
				return privai_fail(err, PRIVAI_EFORMAT, "rank 0 sent an NCCL id of %zu bytes",
						   v.size());
			memcpy(&id, v.data(), sizeof(id));
		}
		ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
		config.blocking = 0;
		ncclResult_t nr = ncclCommInitRankConfig(&G->comm, p->size, id, p->rank, &config);
		if (nr != ncclSuccess && nr != ncclInProgress)
			return privai_fail(err, PRIVAI_EIO, "NCCL cannot join rank %d of %d: %s", p->rank, p->size,
					   ncclGetErrorString(nr));
		if ((r = init_done(G.get(), join, err)) < 0)
			return r;
		if (G->server)
			G->server->close_door();
	} catch (const std::exception &e) {
		return privai_fail(err, PRIVAI_EIO, "rank %d of %d cannot join the group at %s: %.300s", p->rank,
				   p->size, p->init, e.what());
	}
	*ret = &G.release()->g;
	return PRIVAI_OK;
}
