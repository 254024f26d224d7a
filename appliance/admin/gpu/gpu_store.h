/*
 * GPUs in the store.  A node's GPUs arrive as a JSON array, from this
 * node's NVML or in another node's join and heartbeats, and are checked
 * the same way whichever it is:
 *
 *   [{"index": 0, "uuid": "GPU-...", "name": "NVIDIA H100 80GB HBM3",
 *     "memory_bytes": 85520809984, "pci_bus_id": "00000000:18:00.0",
 *     "mig_supported": true, "mig_enabled": true,
 *     "instances": [{"profile_id": 9, "start": 0, "size": 4}]}]
 */
#ifndef PRIVAI_ADMIN_GPU_STORE_H
#define PRIVAI_ADMIN_GPU_STORE_H

#include <cjson/cJSON.h>
#include <sqlite3.h>
#include <stdint.h>

#include "gpu/nvml.h"

/* This node's GPUs as that array (empty on a CPU-only node, with the
 * reason in note).  NULL only when out of memory. */
cJSON *gpu_inventory_json(char *note);

/* Make the gpus rows of node_id match the array: insert, update, and
 * delete the GPUs no longer reported (with their stored MIG layouts, so
 * pass an array only when NVML answered).  A UUID another node holds is
 * refused.  The caller holds the store's mutex inside a transaction.
 * APP_EINVAL names the bad element in err. */
int gpu_store_sync(sqlite3 *db, int64_t node_id, const cJSON *gpus, int64_t now, char *err);

/* A layout of instances as JSON (profile names from the GPU's MIG table). */
cJSON *gpu_instances_json(const char *mig_table, const struct nvml_instance *in, int n);

#endif
