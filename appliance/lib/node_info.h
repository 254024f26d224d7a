/*
 * What this node is made of, read from /proc and /sys under a root
 * prefix (so tests read fixture trees): CPU model, sockets, cores and
 * threads, the flags that matter for inference (AVX2, AVX-512, AMX),
 * NUMA nodes with their CPUs and memory, memory, kernel, NICs.  A file
 * that is missing or holds garbage leaves its fields unknown (0 or "")
 * and is named in `missing`; reading never fails.
 */
#ifndef PRIVAI_NODE_INFO_H
#define PRIVAI_NODE_INFO_H

#include <cjson/cJSON.h>
#include <stdint.h>

#define NODE_MAX_NUMA 16
#define NODE_MAX_NICS 32

struct node_numa {
	int id;
	char cpulist[128]; /* "0-55,112-167" as the kernel writes it */
	int64_t memory_bytes;
};

struct node_nic {
	char name[32];
	char mac[24];
	int speed_mbps;     /* -1: unknown or link down */
	char operstate[16]; /* "up", "down", ... */
	int mtu;
	int numa_node; /* -1: none reported */
	int physical;  /* backed by a device (not a bridge, veth, ...) */
};

struct node_info {
	char hostname[256];
	char kernel[64];
	char cpu_model[128];
	int cpu_sockets, cpu_cores, cpu_threads; /* cores: physical, over all sockets */
	char cpu_flags[160];                     /* the ones we use, space separated: "avx2 avx512f ... amx_tile" */
	int numa_nodes;
	struct node_numa numa[NODE_MAX_NUMA];
	int64_t memory_bytes;
	int n_nics;
	struct node_nic nics[NODE_MAX_NICS];
	char missing[256]; /* sources that could not be read, space separated */
};

/* Read everything under root ("/" on a real node). */
void node_info_read(const char *root, struct node_info *ni);

/* The inventory as the API shows it (and as a joining node reports it). */
cJSON *node_info_json(const struct node_info *ni);

#endif
