/*
 * Where the ranks of a group started apart meet (--dist-init HOST:PORT):
 * rank 0 serves a small in-memory key-value store there, every rank is
 * a client, and the transports swap what they need through it (Gloo its
 * ranks' addresses, NCCL its unique id), as PyTorch's TCPStore and
 * NCCL's own bootstrap do.  A request is op ('S' set, 'G' get once set,
 * 'T' try: empty when unset), key, and for 'S' the value; both are small.
 *
 * After a failed operation each rank that saw it sets "failed/STEP/RANK"
 * and reads the others' keys (missing_ranks): the ranks that did not
 * write are the ones to name.
 *
 * C++, header only: privai-gloo.so and privai-nccl.so each compile it.
 */
#ifndef PRIVAI_DIST_RENDEZVOUS_H
#define PRIVAI_DIST_RENDEZVOUS_H

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern "C" {
#include "privai/status.h"
}

namespace privai_dist {

struct RendezvousError : std::runtime_error {
	explicit RendezvousError(const std::string &m) : std::runtime_error(m)
	{
	}
};

/* ---- the rendezvous store: rank 0 serves it, every rank is a client ---- */

inline int
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

inline int
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
		close_door();
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

	/* The group has formed: no rank may join it now.  A rank started
	 * again after its peer died would otherwise read the formed
	 * group's addresses and connect into it; refused, it keeps trying
	 * until rank 0 starts again with a new store.  The ranks that
	 * joined keep their connections (missing_ranks uses them). */
	void close_door()
	{
		if (fd_ >= 0)
			::shutdown(fd_, SHUT_RDWR);
		if (accept_.joinable())
			accept_.join();
		if (fd_ >= 0)
			::close(fd_);
		fd_ = -1;
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

class StoreClient {
      public:
	~StoreClient()
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
			std::this_thread::sleep_for(std::chrono::milliseconds(200));
		}
		int one = 1;
		setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		/* a peer that never comes must not hold this rank forever */
		answer_within(patience_s);
		return PRIVAI_OK;
	}

	/* A bound on every answer from now on (the rendezvous is done). */
	void answer_within(double s)
	{
		struct timeval tv = { static_cast<time_t>(s), static_cast<suseconds_t>((s - (time_t)s) * 1e6) };
		setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	}

	void set(const std::string &key, const std::vector<char> &data)
	{
		std::lock_guard<std::mutex> g(mu_);
		uint32_t k = static_cast<uint32_t>(key.size()), v = static_cast<uint32_t>(data.size());
		if (write_all(fd_, "S", 1) < 0 || write_all(fd_, &k, 4) < 0 || write_all(fd_, key.data(), k) < 0 ||
		    write_all(fd_, &v, 4) < 0 || write_all(fd_, data.data(), v) < 0)
			throw RendezvousError("the rendezvous store does not answer");
	}

	std::vector<char> get(const std::string &key)
	{
		return ask('G', key);
	}

	/* The value, or empty when the key is unset (never blocks on it). */
	std::vector<char> try_get(const std::string &key)
	{
		return ask('T', key);
	}

      private:
	std::vector<char> ask(char op, const std::string &key)
	{
		std::lock_guard<std::mutex> g(mu_);
		uint32_t k = static_cast<uint32_t>(key.size()), v = 0;
		if (write_all(fd_, &op, 1) < 0 || write_all(fd_, &k, 4) < 0 || write_all(fd_, key.data(), k) < 0 ||
		    read_all(fd_, &v, 4) < 0 || v > kMaxItem)
			throw RendezvousError("the rendezvous store does not answer");
		std::vector<char> out(v);
		if (read_all(fd_, out.data(), v) < 0)
			throw RendezvousError("the rendezvous store does not answer");
		return out;
	}

	int fd_ = -1;
	std::mutex mu_;
};

/* HOST:PORT (or [V6]:PORT) resolved. */
inline int
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
inline std::string
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

/* After a failed operation of step `step`: say so, give the others two
 * seconds to say the same, and append to msg the ranks that did not
 * (", 3" ...), or that rank 0's store itself does not answer. */
inline void
missing_ranks(StoreClient &store, long step, int rank, int size, std::string &msg)
{
	std::string key = "failed/" + std::to_string(step) + "/";
	try {
		store.answer_within(3);
		store.set(key + std::to_string(rank), std::vector<char>(1, 1));
		std::this_thread::sleep_for(std::chrono::milliseconds(2000));
		int k = 0;
		for (int r = 0; r < size; r++)
			if (r != rank && store.try_get(key + std::to_string(r)).empty())
				msg += (k++ ? ", " : " ") + std::to_string(r);
		if (k == 0)
			msg += "s: none (every rank saw it fail)";
	} catch (const std::exception &) {
		msg += " 0, which holds the rendezvous";
	}
}

/* The line a rank ends the group with after `what` of step `step`
 * failed for `cause`: the ranks that did not answer (missing_ranks). */
inline std::string
failure_message(StoreClient &store, const char *what, long step, const char *cause, int rank, int size)
{
	char head[512];
	snprintf(head, sizeof(head), "%s of step %ld failed (%.300s); no answer from rank", what, step, cause);
	std::string msg = head;
	missing_ranks(store, step, rank, size, msg);
	return msg + " (hung or dead: the group stops)";
}

/* Transports whose gather takes one count for every rank send the
 * largest, padded: the largest of counts[0..size), and the ranks'
 * values without their padding, concatenated into out. */
inline size_t
largest(const int *counts, int size)
{
	size_t most = 0;
	for (int r = 0; r < size; r++)
		most = std::max(most, static_cast<size_t>(counts[r]));
	return most;
}

inline void
unpad(const float *padded, size_t most, const int *counts, int size, float *out)
{
	for (int r = 0, at = 0; r < size; at += counts[r], r++)
		std::copy_n(padded + most * static_cast<size_t>(r), counts[r], out + at);
}

} // namespace privai_dist

#endif
