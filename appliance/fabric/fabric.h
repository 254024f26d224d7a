/*
 * What privai-fabric knows about the node: the PCIe topology (GPUs,
 * NVSwitches, RDMA NICs, the switches above them and the GPU-NIC
 * pairing), each NIC's RDMA device, the CPUs of each NUMA node, and the
 * NVIDIA driver and Fabric Manager versions.  Read once under a root
 * prefix; on a live host ("/") the RDMA devices come from libibverbs.
 */
#ifndef PRIVAI_FABRIC_H
#define PRIVAI_FABRIC_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "cpuid.h"
#include "node_info.h"
#include "rdma.h"
#include "topo.h"

struct fabric {
	const char *root;
	struct topo topo;
	struct node_info ni;
	struct cpu_id cpu;
	char driver_version[32];                 /* "" no driver loaded */
	char fm_version[32];                     /* "" no Fabric Manager package */
	int peermem;                             /* nvidia_peermem loaded: GPUDirect RDMA works */
	struct rdma_dev nic_rdma[TOPO_MAX_NICS]; /* per topo NIC; name "" when it has no RDMA device */
	char rdma_source[16];                    /* "libibverbs" or "sysfs" */
	char rdma_problem[160];                  /* why libibverbs was not used, "" when it was */
};

/* Read the node.  use_verbs: ask libibverbs for the RDMA ports (only
 * meaningful on the live host).  0, or an APP_E* code with err (out of memory). */
int fabric_read(const char *root, int use_verbs, struct fabric *f, char *err, size_t errsize);
void fabric_free(struct fabric *f);

/* The NUMA node a device's NCCL <cpu> is: its own, else the first node,
 * else 0. */
int fabric_numa_of(const struct fabric *f, int dev);

/* Append a formatted message to a JSON array of strings; returns 1, so
 * callers can count what they append. */
int fabric_json_addf(cJSON *array, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* One PCI device as JSON: bdf, vendor:device id, NUMA node, the switch above it. */
cJSON *fabric_dev_json(const struct fabric *f, int dev);

/* The node as JSON: GPUs, NVSwitches, NICs with their RDMA ports, PCIe
 * switches, the pairing. */
cJSON *fabric_json(const struct fabric *f);

/* Fill the RDMA ports of f's NICs from libibverbs (rdma_verbs.c).
 * 0, or an APP_E* code with why (no RDMA subsystem, no provider) and f untouched. */
int rdma_verbs_fill(struct fabric *f, char *why, size_t size);

#endif
