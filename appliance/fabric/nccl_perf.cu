/*
 * privai-nccl-perf: NCCL all-reduce bus bandwidth over this node's GPUs,
 * or over several nodes, for privai-fabric validate.  One process a
 * node drives every local GPU (a rank each, one communicator per GPU made
 * in one group), times float sums from -b to -e bytes, and prints
 * nccl-tests' table with nccl-tests' definitions:
 *
 *   algbw = bytes / time          busbw = algbw x 2 (n - 1) / n
 *
 * for n ranks, so that its figures compare with published ones.  Each
 * rank sends rank + 1 in every element; three elements of each result
 * (first, middle, last) are checked against n (n + 1) / 2 and a size with
 * a wrong one counts in #wrong.  Across nodes, node 0 makes NCCL's unique
 * id and hands it to the others over TCP at --init HOST:PORT.
 *
 * usage: privai-nccl-perf [-g GPUS] [-b MIN] [-e MAX] [-f FACTOR] [-w WARMUP] [-n ITERS]
 *                         [--init HOST:PORT --nnodes N --node-rank R]
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime.h>
#include <nccl.h>

#define MAX_GPUS 16

static int
fail(const char *what, const char *why)
{
	fprintf(stderr, "privai-nccl-perf: %s: %s\n", what, why);
	return 1;
}

#define CUDA(call)                                                                   \
	do {                                                                         \
		cudaError_t e_ = (call);                                             \
		if (e_ != cudaSuccess)                                               \
			return fail(#call, cudaGetErrorString(e_));                  \
	} while (0)
#define NCCL(call)                                                                   \
	do {                                                                         \
		ncclResult_t r_ = (call);                                            \
		if (r_ != ncclSuccess)                                               \
			return fail(#call, ncclGetErrorString(r_));                  \
	} while (0)

__global__ void
fill(float *p, size_t n, float v)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		p[i] = v;
}

/* "64M" -> 67108864; -1 when not a size. */
static long long
parse_size(const char *s)
{
	char *end;
	long long v = strtoll(s, &end, 10);

	if (end == s || v < 0)
		return -1;
	switch (*end) {
	case 'K': v <<= 10; end++; break;
	case 'M': v <<= 20; end++; break;
	case 'G': v <<= 30; end++; break;
	default: break;
	}
	return *end == '\0' ? v : -1;
}

static double
now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* Node 0 serves NCCL's id to the other nodes; the others fetch it,
 * retrying for a minute while node 0 starts. */
static int
exchange_id(const char *init, int nnodes, int node_rank, ncclUniqueId *id)
{
	char host[256];
	const char *colon = strrchr(init, ':');
	struct addrinfo hints, *ai = NULL;

	if (colon == NULL || colon == init || (size_t)(colon - init) >= sizeof(host))
		return fail("--init", "wants HOST:PORT");
	memcpy(host, init, (size_t)(colon - init));
	host[colon - init] = '\0';
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_INET;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = node_rank == 0 ? AI_PASSIVE : 0;
	if (getaddrinfo(node_rank == 0 ? NULL : host, colon + 1, &hints, &ai) != 0)
		return fail("--init", "cannot resolve it");
	int s = socket(AF_INET, SOCK_STREAM, 0), one = 1, rc = 1;
	if (s < 0) {
		freeaddrinfo(ai);
		return fail("socket", strerror(errno));
	}
	if (node_rank == 0) {
		setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(s, ai->ai_addr, ai->ai_addrlen) < 0 || listen(s, nnodes) < 0) {
			rc = fail("--init", strerror(errno));
		} else {
			rc = 0;
			for (int k = 1; k < nnodes && rc == 0; k++) {
				int c = accept(s, NULL, NULL);
				if (c < 0 || write(c, id, sizeof(*id)) != (ssize_t)sizeof(*id))
					rc = fail("handing out NCCL's id", strerror(errno));
				if (c >= 0)
					close(c);
			}
		}
	} else {
		for (int tries = 0; tries < 600 && rc != 0; tries++) {
			if (connect(s, ai->ai_addr, ai->ai_addrlen) == 0) {
				size_t got = 0;
				while (got < sizeof(*id)) {
					ssize_t n = read(s, (char *)id + got, sizeof(*id) - got);
					if (n <= 0)
						break;
					got += (size_t)n;
				}
				rc = got == sizeof(*id) ? 0 : fail("fetching NCCL's id", "short read");
				break;
			}
			close(s);
			s = socket(AF_INET, SOCK_STREAM, 0);
			usleep(100000);
		}
		if (rc != 0)
			fprintf(stderr, "privai-nccl-perf: node 0 at %s did not answer within a minute\n", init);
	}
	close(s);
	freeaddrinfo(ai);
	return rc;
}

int
main(int argc, char **argv)
{
	int gpus = 0, factor = 2, warmup = 5, iters = 20, nnodes = 1, node_rank = 0, have = 0;
	long long minb = 1 << 20, maxb = 1LL << 30;
	const char *init = NULL;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (v == NULL)
			return fail(a, "needs a value");
		i++;
		if (strcmp(a, "-g") == 0)
			gpus = atoi(v);
		else if (strcmp(a, "-b") == 0)
			minb = parse_size(v);
		else if (strcmp(a, "-e") == 0)
			maxb = parse_size(v);
		else if (strcmp(a, "-f") == 0)
			factor = atoi(v);
		else if (strcmp(a, "-w") == 0)
			warmup = atoi(v);
		else if (strcmp(a, "-n") == 0)
			iters = atoi(v);
		else if (strcmp(a, "--init") == 0)
			init = v;
		else if (strcmp(a, "--nnodes") == 0)
			nnodes = atoi(v);
		else if (strcmp(a, "--node-rank") == 0)
			node_rank = atoi(v);
		else
			return fail(a, "unknown option");
	}
	if (minb < 4 || maxb < minb || factor < 2 || warmup < 0 || iters < 1 || nnodes < 1 || node_rank < 0 ||
	    node_rank >= nnodes || (nnodes > 1) != (init != NULL))
		return fail("options", "-b and -e are sizes (4 <= min <= max), -f at least 2, -n at least 1; more "
				       "than one node needs --init HOST:PORT and a --node-rank below --nnodes");
	CUDA(cudaGetDeviceCount(&have));
	if (gpus <= 0)
		gpus = have;
	if (gpus < 1 || gpus > have || gpus > MAX_GPUS)
		return fail("-g", "more GPUs than this node has (or none)");

	int nranks = gpus * nnodes, devs[MAX_GPUS];
	ncclComm_t comm[MAX_GPUS];
	cudaStream_t stream[MAX_GPUS];
	float *send[MAX_GPUS], *recv[MAX_GPUS];
	size_t maxn = (size_t)maxb / sizeof(float);

	for (int g = 0; g < gpus; g++)
		devs[g] = g;
	if (nnodes == 1) {
		NCCL(ncclCommInitAll(comm, gpus, devs));
	} else {
		ncclUniqueId id;
		if (node_rank == 0)
			NCCL(ncclGetUniqueId(&id));
		if (exchange_id(init, nnodes, node_rank, &id) != 0)
			return 1;
		NCCL(ncclGroupStart());
		for (int g = 0; g < gpus; g++) {
			CUDA(cudaSetDevice(g));
			NCCL(ncclCommInitRank(&comm[g], nranks, id, node_rank * gpus + g));
		}
		NCCL(ncclGroupEnd());
	}
	for (int g = 0; g < gpus; g++) {
		CUDA(cudaSetDevice(g));
		CUDA(cudaStreamCreate(&stream[g]));
		CUDA(cudaMalloc(&send[g], maxn * sizeof(float)));
		CUDA(cudaMalloc(&recv[g], maxn * sizeof(float)));
	}
	if (node_rank == 0) {
		printf("# nThread 1 nGpus %d minBytes %lld maxBytes %lld step: %d(factor) warmup iters: %d iters: %d "
		       "agg iters: 1 validation: 1 graph: 0\n#\n# Using devices\n",
		       gpus, minb, maxb, factor, warmup, iters);
		for (int g = 0; g < gpus; g++) {
			struct cudaDeviceProp p;
			CUDA(cudaGetDeviceProperties(&p, g));
			printf("#  Rank %2d Group  0 Pid %6d on node %d device %2d [0x%02x] %s\n", g, (int)getpid(),
			       node_rank, g, p.pciBusID, p.name);
		}
		printf("#\n#%62s%35s\n", "out-of-place", "in-place");
		printf("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   "
		       "algbw   busbw #wrong\n");
		printf("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  "
		       "(GB/s)  (GB/s)       \n");
	}
	double total_busbw = 0;
	int sizes = 0, bad_sizes = 0;
	for (long long bytes = minb; bytes <= maxb; bytes *= factor) {
		size_t n = (size_t)bytes / sizeof(float);
		double t_us[2], algbw[2], busbw[2];
		int wrong[2];
		for (int in_place = 0; in_place < 2; in_place++) {
			for (int g = 0; g < gpus; g++) {
				CUDA(cudaSetDevice(g));
				fill<<<256, 256, 0, stream[g]>>>(send[g], n, (float)(node_rank * gpus + g + 1));
				CUDA(cudaStreamSynchronize(stream[g]));
			}
			double t0 = 0;
			for (int it = -warmup; it < iters; it++) {
				if (it == 0) {
					for (int g = 0; g < gpus; g++)
						CUDA(cudaStreamSynchronize(stream[g]));
					t0 = now_us();
				}
				NCCL(ncclGroupStart());
				for (int g = 0; g < gpus; g++)
					NCCL(ncclAllReduce(send[g], in_place ? send[g] : recv[g], n, ncclFloat, ncclSum,
							   comm[g], stream[g]));
				NCCL(ncclGroupEnd());
			}
			for (int g = 0; g < gpus; g++)
				CUDA(cudaStreamSynchronize(stream[g]));
			t_us[in_place] = (now_us() - t0) / iters;
			/* out of place, the last result is in recv; in place the timed runs summed sums, so the
			 * input is filled again and reduced once more to be checked */
			if (in_place) {
				for (int g = 0; g < gpus; g++) {
					CUDA(cudaSetDevice(g));
					fill<<<256, 256, 0, stream[g]>>>(send[g], n, (float)(node_rank * gpus + g + 1));
				}
				NCCL(ncclGroupStart());
				for (int g = 0; g < gpus; g++)
					NCCL(ncclAllReduce(send[g], send[g], n, ncclFloat, ncclSum, comm[g], stream[g]));
				NCCL(ncclGroupEnd());
			}
			wrong[in_place] = 0;
			float want = (float)nranks * (float)(nranks + 1) / 2;
			for (int g = 0; g < gpus; g++) {
				const size_t at[3] = { 0, n / 2, n - 1 };
				CUDA(cudaSetDevice(g));
				CUDA(cudaStreamSynchronize(stream[g]));
				for (int k = 0; k < 3; k++) {
					float v;
					CUDA(cudaMemcpy(&v, (in_place ? send[g] : recv[g]) + at[k], sizeof(v),
							cudaMemcpyDeviceToHost));
					wrong[in_place] += v != want;
				}
			}
			algbw[in_place] = (double)bytes / (t_us[in_place] * 1e3);
			busbw[in_place] = algbw[in_place] * 2.0 * (nranks - 1) / nranks;
		}
		total_busbw += busbw[0];
		sizes++;
		bad_sizes += wrong[0] + wrong[1] > 0;
		if (node_rank == 0)
			printf("%12lld  %12zu     float     sum      -1  %7.1f  %6.2f  %6.2f  %5d  %7.1f  %6.2f  %6.2f  %5d\n",
			       bytes, n, t_us[0], algbw[0], busbw[0], wrong[0], t_us[1], algbw[1], busbw[1], wrong[1]);
		fflush(stdout);
	}
	if (node_rank == 0)
		printf("# Out of bounds values : %d %s\n# Avg bus bandwidth    : %.3f \n#\n", bad_sizes,
		       bad_sizes ? "FAILED" : "OK", total_busbw / sizes);
	for (int g = 0; g < gpus; g++) {
		cudaSetDevice(g);
		cudaFree(send[g]);
		cudaFree(recv[g]);
		ncclCommDestroy(comm[g]);
	}
	return bad_sizes ? 1 : 0;
}
