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
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gloo/allreduce.h>
#include <gloo/broadcast.h>
#include <gloo/gather.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

extern "C" {
#include "privai/collective.h"
#include "privai/status.h"
}

namespace {

using std::chrono::milliseconds;

/* ---- the rendezvous store: rank 0 serves it, every rank is a client ---- */

int
write_all(int fd, const void *p, size_t n)
{
	const char *c = static_cast<const char *>(p);
	while (n > 0) {
		ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL);
		if (w <= 0)
			return -1;
		c += w;
		n -= static_cast<size_t>(w);
	}
	return 0;
}

int
read_all(int fd, void *p, size_t n)
{
	char *c = static_cast<char *>(p);
	while (n > 0) {
		ssize_t r = ::recv(fd, c, n, 0);
		if (r <= 0)
			return -1;
		c += r;
		n -= static_cast<size_t>(r);
	}
	return 0;
}

/* One request: op ('S' set, 'G' get when set, 'T' try: an empty answer
 * when unset), key, and for 'S' the value.  Keys and values are small. */
constexpr uint32_t kMaxItem = 1 << 20;

class StoreServer {
      public:
	~StoreServer()
	{
		{
			std::lock_guard<std::mutex> g(mu_);
			stopping_ = true;
			cv_.notify_all();
		}
		if (fd_ >= 0)
			::shutdown(fd_, SHUT_RDWR);
		if (accept_.joinable())
			accept_.join();
		if (fd_ >= 0)
			::close(fd_);
		{
			std::lock_guard<std::mutex> g(mu_);
			for (int c : clients_)
				::shutdown(c, SHUT_RDWR); /* each client thread ends on its closed socket */
		}
		for (auto &t : threads_)
			t.join();
	}

	int listen_on(const struct sockaddr_storage &a, socklen_t len, char *err)
	{
		int one = 1;
		fd_ = ::socket(a.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd_ < 0 || setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
		    ::bind(fd_, reinterpret_cast<const struct sockaddr *>(&a), len) != 0 || ::listen(fd_, 64) != 0)
			return privai_fail(err, PRIVAI_EIO, "rank 0 cannot listen on the --dist-init address: %s",
					   strerror(errno));
		accept_ = std::thread([this] { accept_loop(); });
		return PRIVAI_OK;
	}

      private:
	void accept_loop()
	{
		for (;;) {
			int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
			if (c < 0)
				return;
			std::lock_guard<std::mutex> g(mu_);
			if (stopping_) {
				::close(c);
				return;
			}
			clients_.push_back(c);
			threads_.emplace_back([this, c] { serve(c); });
		}
	}

	void serve(int c)
	{
		for (;;) {
			char op;
			uint32_t klen, vlen;
			if (read_all(c, &op, 1) < 0 || read_all(c, &klen, 4) < 0 || klen > kMaxItem)
				break;
			std::string key(klen, '\0');
			if (read_all(c, key.data(), klen) < 0)
				break;
			if (op == 'S') {
				if (read_all(c, &vlen, 4) < 0 || vlen > kMaxItem)
					break;
				std::vector<char> v(vlen);
				if (read_all(c, v.data(), vlen) < 0)
					break;
				std::lock_guard<std::mutex> g(mu_);
				kv_[key] = std::move(v);
				cv_.notify_all();
				continue;
			}
			std::vector<char> v;
			{
				std::unique_lock<std::mutex> g(mu_);
				if (op == 'G')
					cv_.wait(g, [&] { return stopping_ || kv_.count(key) != 0; });
				if (kv_.count(key) != 0)
					v = kv_[key];
			}
			vlen = static_cast<uint32_t>(v.size());
			if (write_all(c, &vlen, 4) < 0 || write_all(c, v.data(), v.size()) < 0)
				break;
		}
		std::lock_guard<std::mutex> g(mu_);
		::close(c);
		clients_.erase(std::remove(clients_.begin(), clients_.end(), c), clients_.end());
	}

	int fd_ = -1;
	bool stopping_ = false; /* under mu_ */
	std::thread accept_;
	std::vector<std::thread> threads_;
	std::vector<int> clients_;
	std::mutex mu_;
	std::condition_variable cv_;
	std::map<std::string, std::vector<char>> kv_;
};

class StoreClient : public gloo::rendezvous::Store {
      public:
	~StoreClient() override
	{
		if (fd_ >= 0)
			::close(fd_);
	}

	/* Rank 0 may start after the others: try until `patience`. */
	int connect_to(const struct sockaddr_storage &a, socklen_t len, double patience_s, char *err)
	{
		auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(patience_s);
		for (;;) {
			fd_ = ::socket(a.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
			if (fd_ >= 0 && ::connect(fd_, reinterpret_cast<const struct sockaddr *>(&a), len) == 0)
				break;
			int e = errno;
			if (fd_ >= 0)
				::close(fd_);
			fd_ = -1;
			if (std::chrono::steady_clock::now() > until)
				return privai_fail(err, PRIVAI_EUNAVAIL,
						   "rank 0's rendezvous at the --dist-init address does not answer "
						   "(%s, after %.0f s)",
						   strerror(e), patience_s);
			std::this_thread::sleep_for(milliseconds(200));
		}
		int one = 1;
		setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		return PRIVAI_OK;
	}

	/* A bound on every answer from now on (the rendezvous is done). */
	void answer_within(double s)
	{
		struct timeval tv = { static_cast<time_t>(s), static_cast<suseconds_t>((s - (time_t)s) * 1e6) };
		setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	}

	void set(const std::string &key, const std::vector<char> &data) override
	{
		std::lock_guard<std::mutex> g(mu_);
		uint32_t k = static_cast<uint32_t>(key.size()), v = static_cast<uint32_t>(data.size());
		if (write_all(fd_, "S", 1) < 0 || write_all(fd_, &k, 4) < 0 || write_all(fd_, key.data(), k) < 0 ||
		    write_all(fd_, &v, 4) < 0 || write_all(fd_, data.data(), v) < 0)
			throw gloo::IoException("the rendezvous store does not answer");
	}

	std::vector<char> get(const std::string &key) override
	{
		return ask('G', key);
	}

	/* The value, or empty when the key is unset (never blocks on it). */
	std::vector<char> try_get(const std::string &key)
	{
		return ask('T', key);
	}

	void wait(const std::vector<std::string> &keys) override
	{
		for (const auto &k : keys)
			(void)get(k);
	}

	void wait(const std::vector<std::string> &keys, const milliseconds &) override
	{
		wait(keys);
	}

      private:
	std::vector<char> ask(char op, const std::string &key)
	{
		std::lock_guard<std::mutex> g(mu_);
		uint32_t k = static_cast<uint32_t>(key.size()), v = 0;
		if (write_all(fd_, &op, 1) < 0 || write_all(fd_, &k, 4) < 0 || write_all(fd_, key.data(), k) < 0 ||
		    read_all(fd_, &v, 4) < 0 || v > kMaxItem)
			throw gloo::IoException("the rendezvous store does not answer");
		std::vector<char> out(v);
		if (read_all(fd_, out.data(), v) < 0)
			throw gloo::IoException("the rendezvous store does not answer");
		return out;
	}

	int fd_ = -1;
	std::mutex mu_;
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
	char msg[1024];
	std::string key = "failed/" + std::to_string(G->step) + "/";
	size_t len = (size_t)snprintf(msg, sizeof(msg), "%s of step %ld failed (%.300s); no answer from rank", what,
				      G->step, e.what());
	try {
		G->store->answer_within(3);
		G->store->set(key + std::to_string(g->rank), std::vector<char>(1, 1));
		std::this_thread::sleep_for(milliseconds(2000));
		int k = 0;
		for (int r = 0; r < g->size && len < sizeof(msg); r++)
			if (r != g->rank && G->store->try_get(key + std::to_string(r)).empty())
				len += (size_t)snprintf(msg + len, sizeof(msg) - len, "%s %d", k++ ? "," : "", r);
		if (k == 0 && len < sizeof(msg))
			snprintf(msg + len, sizeof(msg) - len, "s: none (every rank saw it fail)");
	} catch (const std::exception &) {
		snprintf(msg + len, sizeof(msg) - len, " 0, which holds the rendezvous");
	}
	len = strlen(msg);
	if (len < sizeof(msg))
		snprintf(msg + len, sizeof(msg) - len, " (hung or dead: the group stops)");
	gloo_abort(g, 3, msg);
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
gloo_bcast(struct coll *g, void *buf, size_t bytes, int idle, char *)
{
	GlooGroup *G = group_of(g);
	try {
		gloo::BroadcastOptions o(G->ctx);
		o.setOutput(static_cast<uint8_t *>(buf), bytes);
		o.setRoot(0);
		o.setTag(G->tag++);
		o.setTimeout(idle ? milliseconds(24LL * 3600 * 1000) : G->deadline);
		gloo::broadcast(o);
	} catch (const std::exception &e) {
		group_failed(G, "a step's broadcast", e);
	}
	if (idle || g->rank == 0)
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
	size_t most = 0;

	for (int r = 0; r < g->size; r++)
		most = std::max(most, static_cast<size_t>(counts[r]));
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
		for (int r = 0, at = 0; r < g->size; at += counts[r], r++)
			std::copy_n(G->pad_out.begin() + static_cast<long>(most) * r, counts[r], out + at);
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
		o.setTimeout(milliseconds(24LL * 3600 * 1000)); /* ranks load their parts at their own pace */
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

/* HOST:PORT (or [V6]:PORT) resolved. */
int
resolve(const char *init, struct sockaddr_storage *a, socklen_t *len, char *err)
{
	std::string s(init);
	size_t colon = s.rfind(':');
	if (colon == std::string::npos || colon == 0 || colon + 1 == s.size())
		return privai_fail(err, PRIVAI_EINVAL, "--dist-init takes HOST:PORT, not '%.100s'", init);
	std::string host = s.substr(0, colon), port = s.substr(colon + 1);
	if (host.size() > 2 && host.front() == '[' && host.back() == ']')
		host = host.substr(1, host.size() - 2);
	struct addrinfo hints = {}, *res = nullptr;
	hints.ai_socktype = SOCK_STREAM;
	int r = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
	if (r != 0 || res == nullptr)
		return privai_fail(err, PRIVAI_EINVAL, "--dist-init %.100s: %s", init, gai_strerror(r));
	memcpy(a, res->ai_addr, res->ai_addrlen);
	*len = res->ai_addrlen;
	freeaddrinfo(res);
	return PRIVAI_OK;
}

/* The address of this machine that reaches rank 0: the one Gloo's
 * connections are made from. */
std::string
local_address_towards(const struct sockaddr_storage &a, socklen_t len)
{
	struct sockaddr_storage me = {};
	socklen_t mlen = sizeof(me);
	char host[NI_MAXHOST] = "";
	int fd = ::socket(a.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (fd >= 0 && ::connect(fd, reinterpret_cast<const struct sockaddr *>(&a), len) == 0 &&
	    getsockname(fd, reinterpret_cast<struct sockaddr *>(&me), &mlen) == 0)
		getnameinfo(reinterpret_cast<struct sockaddr *>(&me), mlen, host, sizeof(host), nullptr, 0,
			    NI_NUMERICHOST);
	if (fd >= 0)
		::close(fd);
	return host;
}

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
	if ((r = resolve(p->init, &a, &len, err)) < 0)
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
		gloo::transport::tcp::attr attr(local_address_towards(a, len).c_str());
		auto dev = gloo::transport::tcp::CreateDevice(attr);
		G->ctx = std::make_shared<gloo::rendezvous::Context>(p->rank, p->size);
		/* the mesh forms when every rank has come: as long as joining may take */
		G->ctx->setTimeout(milliseconds(static_cast<long long>((p->join_s > 0 ? p->join_s : 300) * 1000)));
		G->ctx->connectFullMesh(*G->store, dev);
		G->ctx->setTimeout(G->deadline);
	} catch (const std::exception &e) {
		return privai_fail(err, PRIVAI_EIO, "rank %d of %d cannot join the group at %s: %.300s", p->rank,
				   p->size, p->init, e.what());
	}
	*ret = &G.release()->g;
	return PRIVAI_OK;
}
