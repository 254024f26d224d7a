/*
 * MIG layout planning with the GPU instance profiles and placements NVML
 * reports for A100-40GB, A100-80GB, H100-80GB and H200-141GB.  A GPU has 8
 * memory slots and 7 compute slices; a profile takes `size` slots from one
 * of its fixed start slots, instances may not overlap, and a profile has
 * an instance limit (one for the +me media-extension profiles).  These are
 * the rules `nvidia-smi mig -lgipp` prints; a layout that breaks one is
 * refused with the rule it breaks.
 */
#ifndef PRIVAI_ADMIN_MIG_H
#define PRIVAI_ADMIN_MIG_H

#include <stddef.h>
#include <stdint.h>

#define MIG_SLOTS 8
#define MIG_COMPUTE 7
#define MIG_MAX_INSTANCES 7

struct mig_profile {
	const char *name; /* "3g.40gb" */
	int nvml_id;      /* NVML_GPU_INSTANCE_PROFILE_* */
	int compute;      /* compute slices */
	int size;         /* memory slots */
	int max;          /* instances per GPU */
	int n_starts;
	int starts[MIG_SLOTS];
	double memory_gb;
};

struct mig_gpu {
	const char *name; /* "H100-80GB" */
	int n_profiles;
	struct mig_profile profiles[8];
};

struct mig_instance {
	const struct mig_profile *profile;
	int start; /* -1: let mig_layout_place choose */
};

/* A table by our name ("H100-80GB", "H200-141GB", "A100-80GB", "A100-40GB"). */
const struct mig_gpu *mig_gpu_find(const char *name);
/* The table for a device as NVML names it, with its memory; NULL when the
 * device has no MIG (or one we have no table for). */
const struct mig_gpu *mig_gpu_for_device(const char *nvml_name, uint64_t memory_bytes);
const struct mig_profile *mig_profile_find(const struct mig_gpu *g, const char *name);
const struct mig_profile *mig_profile_by_id(const struct mig_gpu *g, int nvml_id);

/* 0 when every instance has a start and the layout is valid; otherwise APP_EINVAL
 * with the first rule broken in why. */
int mig_layout_check(const struct mig_gpu *g, const struct mig_instance *in, int n, char *why, size_t why_size);
/* Choose starts for the instances whose start is -1 (keeping the others),
 * largest first; 0, or an APP_E* code with why when no placement exists. */
int mig_layout_place(const struct mig_gpu *g, struct mig_instance *in, int n, char *why, size_t why_size);
/* The starts at which one more instance of p fits beside the layout;
 * returns how many were written to starts (at most MIG_SLOTS). */
int mig_free_starts(const struct mig_gpu *g, const struct mig_instance *in, int n, const struct mig_profile *p,
		    int *starts);

#endif
