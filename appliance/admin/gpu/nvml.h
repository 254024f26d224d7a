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

#endif
