/*
 * Fabric validation: what the links between GPUs and nodes carry,
 * measured with the field's tools and held against a pass mark derived
 * from the hardware found.
 *
 *   rdma       ib_write_bw (Debian's perftest) between two of the node's
 *              NICs, once from host memory and, where nvidia_peermem is
 *              loaded, once from GPU memory (GPUDirect RDMA); pass mark
 *              95 % of the port's link rate (~380 Gb/s on 400 Gb/s NDR).
 *   nccl-node  all-reduce bus bandwidth over the node's GPUs
 *              (privai-nccl-perf, nccl-tests' definitions: algbw = bytes /
 *              time, busbw = algbw x 2 (n - 1) / n); pass mark 85 % of
 *              what the board's NVLink gives (HGX H100/H200: ~480 GB/s).
 *   nccl-nodes the same over this node and its peers, against the NICs'
 *              count x rate (a ring crosses each NIC once).
 *
 * This file holds what needs no process: parsing the tools' output,
 * the marks, the hints a failure gets.  validate_cmd.c runs the tools.
 */
#ifndef PRIVAI_FABRIC_VALIDATE_H
#define PRIVAI_FABRIC_VALIDATE_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "fabric.h"

#define VALIDATE_RDMA_FRACTION 0.95
#define VALIDATE_NVLINK_FRACTION 0.85
#define VALIDATE_NODES_FRACTION 0.80

/* ib_write_bw's report: the average bandwidth of its result line, in
 * Gb/s (MB/s reports are converted).  0, or APP_EFORMAT with why. */
int validate_parse_ib_bw(const char *text, double *gbits, char *why, size_t size);

/* privai-nccl-perf's (nccl-tests') table: the out-of-place bus
 * bandwidth at the largest size, in GB/s, and the rows with wrong
 * results.  0, or APP_EFORMAT with why. */
int validate_parse_nccl(const char *text, double *busbw, long long *largest, int *wrong, char *why, size_t size);

/* The NVLink all-reduce bus bandwidth an 8-GPU board of this GPU model
 * reaches (GB/s, as measured on the board by nccl-tests), 0 when none is
 * known (PCIe GPUs: no mark, the figure is reported). */
double validate_nvlink_reference(const struct fabric *f);

/* One test's result, added to the report: its state is pass when
 * measured >= mark, fail below it, "no-mark" when mark is 0.  Hints
 * (a JSON array the caller fills) are kept on failure only. */
cJSON *validate_result(cJSON *tests, const char *kind, const char *name, double measured, const char *unit, double mark,
		       const char *mark_why);

/* A test that did not run or whose output could not be read: state
 * "skipped" (nothing to test, or a tool missing) or "error". */
cJSON *validate_not_run(cJSON *tests, const char *kind, const char *name, const char *state, const char *why);

/* The fixes worth trying when an RDMA test between NICs a and b (topo
 * NIC indexes) falls short; gdr: the GPU-memory run. */
void validate_rdma_hints(const struct fabric *f, int a, int b, int gdr, cJSON *hints);

/* The same for an all-reduce inside the node, or across nodes. */
void validate_nccl_hints(const struct fabric *f, int across_nodes, cJSON *hints);

#endif
