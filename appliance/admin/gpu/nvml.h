/*
 * GPU inventory and MIG through NVML, loaded at run time (dlopen of
 * libnvidia-ml.so.1, or the library PRIVAI_NVML_LIB names): a node
 * without it is a CPU-only node, not an error.  Only the handful of NVML
 * entry points used here are declared, with NVML's own ABI.
 */
#ifndef PRIVAI_ADMIN_NVML_H
#define PRIVAI_ADMIN_NVML_H

#include <stdint.h>

#define NVML_MAX_GPUS 64
#define NVML_MAX_INSTANCES 7

struct nvml_instance {
	int profile_id;  /* NVML profile id: 19 = 1g, 15, 14, 9, 5, 0, 20 */
	int start, size; /* placement in memory slots */
	unsigned gi_id;  /* the GPU instance's id, as read */
	char uuid[96];   /* its MIG device's "MIG-..." UUID (what CUDA_VISIBLE_DEVICES takes), or "" */
};

struct nvml_gpu {
	int index;
	char uuid[96];
	char name[96];
	uint64_t memory_bytes;
	char pci_bus_id[32];
	int mig_supported;
	int mig_current, mig_pending; /* 1 enabled */
	int n_instances;
	struct nvml_instance inst[NVML_MAX_INSTANCES];
};

/* Every GPU NVML sees.  APP_ENOTFOUND (with err saying so) when there
 * is no NVML library: a CPU-only node. */
int nvml_inventory(struct nvml_gpu *gpus, int max, int *n, char *err);

/* Replace the GPU instances of the GPU with this UUID by the layout
 * given (MIG mode must already be enabled: it is never changed here). */
int nvml_apply_layout(const char *uuid, const struct nvml_instance *inst, int n, char *err);

/* What NVML says a GPU, or a MIG instance, is doing now.  A reading NVML
 * does not give (a MIG device has no utilization or temperature of its
 * own; an older driver may lack a call) is NAN. */
struct nvml_reading {
	char uuid[96];   /* GPU-... or MIG-... */
	char parent[96]; /* a MIG instance's GPU, else "" */
	double util_pct, mem_util_pct;
	double mem_used_bytes, mem_total_bytes;
	double temp_c, power_w;
	double ecc_corrected, ecc_uncorrected; /* volatile counts: since the driver loaded */
};

/* A reading of every GPU and every MIG instance NVML sees; APP_ENOTFOUND
 * without NVML, as nvml_inventory. */
int nvml_read_all(struct nvml_reading *out, int max, int *n, char *err);

#endif
