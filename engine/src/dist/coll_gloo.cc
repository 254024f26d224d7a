/*
 * The collectives of a tensor-parallel group over Gloo's TCP transport,
 * for ranks that no launcher started together: each node's privai-admin
 * starts its own rank with --dist-init HOST:PORT and --node-rank R, and
 * the ranks find each other there.  privai-gloo.so, loaded by coll_new().
 *
 * Why not MPI here: Open MPI 4.1 joins processes it did not launch only
 * through MPI_Comm_connect/accept, which needs a name server (ompi-server)
 * every process was started knowing; admins that start their own engine
 * units have no such launcher.  Gloo (Debian's libgloo) does the
 * collectives; what it leaves to the caller is the rendezvous store its
 * ranks swap addresses through, which is here: rank 0 listens on the
 * --dist-init port and keeps the keys in memory, the way PyTorch's
 * TCPStore and NCCL's bootstrap do.
 *
 * Gloo's operations block on condition variables (no spinning), and each
 * takes a timeout: the group's deadline inside a step, a day for a
 * follower waiting for the next one.  An operation that fails (a timeout,
 * a peer's connection closed) makes every rank that sees it say so in the
 * store and read who else did, and end its process naming the ranks that
 * did not answer: the others' operations then fail in turn.
 */
#include <memory>

#include <gloo/allreduce.h>
#include <gloo/broadcast.h>
#include <gloo/gather.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include "dist/rendezvous.h"

extern "C" {
#include "privai/collective.h"
}

namespace {

using privai_dist::StoreClient;
using privai_dist::StoreServer;
using std::chrono::milliseconds;

/* Gloo's view of the rendezvous store. */
class GlooStore : public gloo::rendezvous::Store {
      public:
	explicit GlooStore(StoreClient &c) : c_(c)
	{
	}
	void set(const std::string &key, const std::vector<char> &data) override
	{
		c_.set(key, data);
	}
	std::vector<char> get(const std::string &key) override
	{
		return c_.get(key);
	}
	void wait(const std::vector<std::string> &keys) override
	{
		for (const auto &k : keys)
			(void)c_.get(k);
	}
	void wait(const std::vector<std::string> &keys, const milliseconds &) override
	{
		wait(keys);
	}

      private:
	StoreClient &c_;
};

/* ---- the group ---- */

struct GlooGroup {
	struct coll g;
	std::unique_ptr<StoreServer> server;
	std::shared_ptr<StoreClient> store;
	std::shared_ptr<gloo::rendezvous::Context> ctx;
	milliseconds deadline;
	long step = 0;
	uint32_t tag = 0;
	std::vector<float> pad_in, pad_out;
};

GlooGroup *
group_of(struct coll *g)
{
	return static_cast<GlooGroup *>(g->impl);
}

[[noreturn]] void
gloo_abort(struct coll *g, int code, const char *why)
{
	if (why != nullptr) {
		fprintf(stderr, "privai-engine: rank %d of %d (%s): %s\n", g->rank, g->size, g->host, why);
		fflush(stderr);
	}
	_exit(code); /* Gloo's threads and sockets go with the process; the peers' next operation fails */
}

/* An operation failed: say so in the store, give the others a moment to
 * say the same, and end the group naming those that did not. */
[[noreturn]] void
group_failed(GlooGroup *G, const char *what, const std::exception &e)
{
	struct coll *g = &G->g;
	gloo_abort(g, 3, privai_dist::failure_message(*G->store, what, G->step, e.what(), g->rank, g->size).c_str());
}

int
gloo_allreduce_sum(struct coll *g, float *buf, size_t count, char *)
{
	GlooGroup *G = group_of(g);
	auto t0 = std::chrono::steady_clock::now();
	try {
		gloo::AllreduceOptions o(G->ctx);
		o.setOutput(buf, count);
		o.setReduceFunction(
			static_cast<void (*)(void *, const void *, const void *, size_t)>(&gloo::sum<float>));
		o.setTag(G->tag++);
		o.setTimeout(G->deadline);
		gloo::allreduce(o);
	} catch (const std::exception &e) {
		group_failed(G, "an all-reduce", e);
	}
	g->stats.n_allreduce++;
	g->stats.allreduce_bytes += count * sizeof(float);
	g->stats.allreduce_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
	return PRIVAI_OK;
}

int
gloo_bcast(struct coll *g, void *buf, size_t bytes, int flags, char *)
{
	GlooGroup *G = group_of(g);
	try {
		gloo::BroadcastOptions o(G->ctx);
		o.setOutput(static_cast<uint8_t *>(buf), bytes);
		o.setRoot(0);
		o.setTag(G->tag++);
		o.setTimeout((flags & COLL_NO_DEADLINE) ? milliseconds(24LL * 3600 * 1000) : G->deadline);
		gloo::broadcast(o);
	} catch (const std::exception &e) {
		group_failed(G, "a step's broadcast", e);
	}
	if (flags & COLL_STEP_BEGIN)
		G->step++;
	g->stats.n_steps++;
	g->stats.step_bytes += bytes;
	return PRIVAI_OK;
}

/* Gloo's gather takes one count for every rank: each sends the largest,
 * padded, and rank 0 drops the padding. */
int
gloo_gather(struct coll *g, const float *in, const int *counts, float *out, char *err)
{
	GlooGroup *G = group_of(g);
	size_t most = privai_dist::largest(counts, g->size);

	try {
		G->pad_in.assign(most, 0.0f);
		std::copy(in, in + counts[g->rank], G->pad_in.begin());
		if (g->rank == 0)
			G->pad_out.resize(most * static_cast<size_t>(g->size));
	} catch (const std::bad_alloc &) {
		return privai_fail(err, PRIVAI_ENOMEM, "out of memory for a gather of %zu values", most);
	}
	try {
		gloo::GatherOptions o(G->ctx);
		o.setInput(G->pad_in.data(), most);
		if (g->rank == 0)
			o.setOutput(G->pad_out.data(), G->pad_out.size());
		o.setRoot(0);
		o.setTag(G->tag++);
		o.setTimeout(G->deadline);
		gloo::gather(o);
	} catch (const std::exception &e) {
		group_failed(G, "a gather of logits", e);
	}
	if (g->rank == 0)
		privai_dist::unpad(G->pad_out.data(), most, counts, g->size, out);
	return PRIVAI_OK;
}

int
gloo_agree(struct coll *g, int ok, char *)
{
	GlooGroup *G = group_of(g);
	int all = ok != 0;
	try {
		gloo::AllreduceOptions o(G->ctx);
		o.setOutput(&all, 1);
		o.setReduceFunction(static_cast<void (*)(void *, const void *, const void *, size_t)>(&gloo::min<int>));
		o.setTag(G->tag++);
		/* ranks load their parts at their own pace, but a rank that never
		 * comes must not hold the others for ever */
		o.setTimeout(milliseconds(30LL * 60 * 1000));
		gloo::allreduce(o);
	} catch (const std::exception &e) {
		group_failed(G, "an agreement", e);
	}
	return all;
}

void
gloo_destroy(struct coll *g)
{
	delete group_of(g);
}

const struct coll_ops gloo_ops = {
	"gloo", "host", gloo_allreduce_sum, gloo_bcast, gloo_gather, gloo_agree, gloo_abort, gloo_destroy,
};

} // namespace

extern "C" int privai_coll_gloo_new(const struct coll_params *p, struct coll **ret, char *err);

extern "C" int
privai_coll_gloo_new(const struct coll_params *p, struct coll **ret, char *err)
{
	struct sockaddr_storage a = {};
	socklen_t len = 0;
	int r;

	if (p->init == nullptr || p->rank < 0 || p->rank >= p->size)
		return privai_fail(err, PRIVAI_EINVAL, "rank %d of a group of %d, meeting at %s", p->rank, p->size,
				   p->init ? p->init : "(no --dist-init)");
	if ((r = privai_dist::resolve(p->init, &a, &len, err)) < 0)
		return r;
	std::unique_ptr<GlooGroup> G;
	try {
		G.reset(new GlooGroup());
		G->g.ops = &gloo_ops;
		G->g.rank = p->rank;
		G->g.size = p->size;
		G->g.impl = G.get();
		gethostname(G->g.host, sizeof(G->g.host) - 1);
		double deadline = p->deadline_s > 0 ? p->deadline_s : 60;
		G->deadline = milliseconds(static_cast<long long>(deadline * 1000));
		if (p->rank == 0) {
			G->server.reset(new StoreServer());
			if ((r = G->server->listen_on(a, len, err)) < 0)
				return r;
		}
		G->store = std::make_shared<StoreClient>();
		if ((r = G->store->connect_to(a, len, p->join_s > 0 ? p->join_s : 300, err)) < 0)
			return r;
		gloo::transport::tcp::attr attr(privai_dist::local_address_towards(a, len).c_str());
		auto dev = gloo::transport::tcp::CreateDevice(attr);
		G->ctx = std::make_shared<gloo::rendezvous::Context>(p->rank, p->size);
		/* the mesh forms when every rank has come: as long as joining may take */
		G->ctx->setTimeout(milliseconds(static_cast<long long>((p->join_s > 0 ? p->join_s : 300) * 1000)));
		GlooStore gs(*G->store);
		G->ctx->connectFullMesh(gs, dev);
		if (G->server)
			G->server->close_door();
		G->ctx->setTimeout(G->deadline);
	} catch (const std::exception &e) {
		return privai_fail(err, PRIVAI_EIO, "rank %d of %d cannot join the group at %s: %.300s", p->rank,
				   p->size, p->init, e.what());
	}
	*ret = &G.release()->g;
	return PRIVAI_OK;
}
