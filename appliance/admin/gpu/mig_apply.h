/*
 * MIG layouts kept in gpu_partitions and applied through NVML.  The
 * store says what each GPU should have; a reboot loses GPU instances, so
 * at start every GPU of this node whose instances differ from its stored
 * layout gets it applied again.  MIG mode itself is never changed.
 */
#ifndef PRIVAI_ADMIN_MIG_APPLY_H
#define PRIVAI_ADMIN_MIG_APPLY_H

#include <sqlite3.h>
#include <stdint.h>

#include "gpu/mig.h"

struct admin;

/* The layout stored for gpu_id, read with table t: its count (at most
 * MIG_MAX_INSTANCES; rows naming a profile t lacks are skipped). */
int mig_layout_load(sqlite3 *db, int64_t gpu_id, const struct mig_gpu *t, struct mig_instance *in);

/* Replace gpu_id's stored layout by in (checked already), as planned, in
 * one transaction; 0, or APP_EIO (sqlite3_errmsg says why). */
int mig_layout_store(sqlite3 *db, int64_t gpu_id, const struct mig_instance *in, int n);

/* Apply gpu_id's stored layout on this node and record the result on its
 * partitions (applied, or failed with the reason) and the GPU's
 * instances as NVML then reports them.  The caller holds the store's
 * mutex.  APP_OK or the NVML error in err. */
int mig_apply_gpu(struct admin *a, int64_t gpu_id, char *err);

/* At start: re-apply where NVML's instances differ from the store.
 * Counts what was applied and what failed; takes the store's mutex. */
void mig_reapply(struct admin *a, int *applied, int *failed);

#endif
