/* MIG profile tables and the placement rules. */
#include <stdio.h>
#include <string.h>

#include "status.h"
#include "gpu/mig.h"

/* The seven GPU instance profiles every table has, by NVML id, with the
 * placements NVML reports: 1g on any of slots 0-6 (slot 7 only ever goes
 * with the slot before it), 1g with double memory and 2g on even slots,
 * 3g on 0 or 4, 4g and 7g on 0. */
#define PROFILES(m1, m2, m3, m4, m7)                                                                                   \
	{                                                                                                              \
		{ "1g." #m1 "gb", 19, 1, 1, 7, 7, { 0, 1, 2, 3, 4, 5, 6 }, m1 },                                       \
			{ "1g." #m1 "gb+me", 20, 1, 1, 1, 7, { 0, 1, 2, 3, 4, 5, 6 }, m1 },                            \
			{ "1g." #m2 "gb", 15, 1, 2, 4, 4, { 0, 2, 4, 6 }, m2 },                                        \
			{ "2g." #m2 "gb", 14, 2, 2, 3, 3, { 0, 2, 4 }, m2 },                                           \
			{ "3g." #m3 "gb", 9, 3, 4, 2, 2, { 0, 4 }, m3 }, { "4g." #m4 "gb", 5, 4, 4, 1, 1, { 0 }, m4 }, \
			{ "7g." #m7 "gb", 0, 7, 8, 1, 1, { 0 }, m7 },                                                  \
	}

static const struct mig_gpu gpus[] = {
	{ "A100-40GB", 7, PROFILES(5, 10, 20, 20, 40) },
	{ "A100-80GB", 7, PROFILES(10, 20, 40, 40, 80) },
	{ "H100-80GB", 7, PROFILES(10, 20, 40, 40, 80) },
	{ "H200-141GB", 7, PROFILES(18, 35, 71, 71, 141) },
};

const struct mig_gpu *
mig_gpu_find(const char *name)
{
	for (size_t i = 0; i < sizeof(gpus) / sizeof(gpus[0]); i++)
		if (strcmp(gpus[i].name, name) == 0)
			return &gpus[i];
	return NULL;
}

const struct mig_gpu *
mig_gpu_for_device(const char *nvml_name, uint64_t memory_bytes)
{
	double gib = (double)memory_bytes / (1024.0 * 1024 * 1024);

	if (strstr(nvml_name, "H200") != NULL)
		return mig_gpu_find("H200-141GB");
	/* the H100 NVL (94 GB) has other profiles, which we have no table for */
	if (strstr(nvml_name, "H100") != NULL && strstr(nvml_name, "NVL") == NULL && gib < 90)
		return mig_gpu_find("H100-80GB");
	if (strstr(nvml_name, "A100") != NULL)
		return mig_gpu_find(gib > 60 ? "A100-80GB" : "A100-40GB");
	return NULL;
}

const struct mig_profile *
mig_profile_find(const struct mig_gpu *g, const char *name)
{
	for (int i = 0; i < g->n_profiles; i++)
		if (strcmp(g->profiles[i].name, name) == 0)
			return &g->profiles[i];
	return NULL;
}

const struct mig_profile *
mig_profile_by_id(const struct mig_gpu *g, int nvml_id)
{
	for (int i = 0; i < g->n_profiles; i++)
		if (g->profiles[i].nvml_id == nvml_id)
			return &g->profiles[i];
	return NULL;
}

static int
start_allowed(const struct mig_profile *p, int start)
{
	for (int i = 0; i < p->n_starts; i++)
		if (p->starts[i] == start)
			return 1;
	return 0;
}

static void
starts_text(const struct mig_profile *p, char *out, size_t size)
{
	size_t len = 0;

	out[0] = '\0';
	for (int i = 0; i < p->n_starts && len < size; i++)
		len += (size_t)snprintf(out + len, size - len, "%s%d", i ? ", " : "", p->starts[i]);
}

int
mig_layout_check(const struct mig_gpu *g, const struct mig_instance *in, int n, char *why, size_t why_size)
{
	int owner[MIG_SLOTS], count[8] = { 0 }, compute = 0;
	char starts[40];

	if (n > MIG_MAX_INSTANCES) {
		snprintf(why, why_size, "%d instances; a %s holds at most %d", n, g->name, MIG_MAX_INSTANCES);
		return APP_EINVAL;
	}
	for (int s = 0; s < MIG_SLOTS; s++)
		owner[s] = -1;
	for (int i = 0; i < n; i++) {
		const struct mig_profile *p = in[i].profile;
		int k = (int)(p - g->profiles);
		if (k < 0 || k >= g->n_profiles) {
			snprintf(why, why_size, "instance %d: a profile of another GPU type", i);
			return APP_EINVAL;
		}
		if (!start_allowed(p, in[i].start)) {
			starts_text(p, starts, sizeof(starts));
			snprintf(why, why_size, "instance %d: %s cannot start at slot %d (it starts at %s)", i, p->name,
				 in[i].start, starts);
			return APP_EINVAL;
		}
		if (++count[k] > p->max) {
			snprintf(why, why_size, "%s: at most %d per GPU", p->name, p->max);
			return APP_EINVAL;
		}
		for (int s = in[i].start; s < in[i].start + p->size; s++) {
			if (owner[s] >= 0) {
				snprintf(why, why_size,
					 "instance %d (%s at %d) overlaps instance %d (%s at %d) at slot %d", i,
					 p->name, in[i].start, owner[s], in[owner[s]].profile->name, in[owner[s]].start,
					 s);
				return APP_EINVAL;
			}
			owner[s] = i;
		}
		compute += p->compute;
	}
	/* the slots already keep compute within 7; say so if they ever do not */
	if (compute > MIG_COMPUTE) {
		snprintf(why, why_size, "%d compute slices; a %s has %d", compute, g->name, MIG_COMPUTE);
		return APP_EINVAL;
	}
	return 0;
}

/* Depth-first over the instances in order[], each at each allowed start. */
static int
place(const struct mig_gpu *g, struct mig_instance *in, int n, const int *order, int at)
{
	char why[160];

	if (at == n)
		return 0;
	struct mig_instance *x = &in[order[at]];
	if (x->start >= 0)
		return place(g, in, n, order, at + 1);
	for (int i = 0; i < x->profile->n_starts; i++) {
		x->start = x->profile->starts[i];
		/* check only what is placed so far */
		struct mig_instance sub[MIG_MAX_INSTANCES];
		int m = 0;
		for (int k = 0; k < n; k++)
			if (in[k].start >= 0)
				sub[m++] = in[k];
		if (mig_layout_check(g, sub, m, why, sizeof(why)) == 0 && place(g, in, n, order, at + 1) == 0)
			return 0;
	}
	x->start = -1;
	return APP_EBUSY;
}

int
mig_layout_place(const struct mig_gpu *g, struct mig_instance *in, int n, char *why, size_t why_size)
{
	int order[MIG_MAX_INSTANCES];
	struct mig_instance fixed[MIG_MAX_INSTANCES] = { { NULL, 0 } };
	int m = 0;

	if (n > MIG_MAX_INSTANCES) {
		snprintf(why, why_size, "%d instances; a %s holds at most %d", n, g->name, MIG_MAX_INSTANCES);
		return APP_EINVAL;
	}
	for (int i = 0; i < n; i++)
		if (in[i].start >= 0)
			fixed[m++] = in[i];
	if (mig_layout_check(g, fixed, m, why, why_size) < 0)
		return APP_EINVAL;
	/* fixed ones first, then the largest, which have the fewest starts */
	for (int i = 0; i < n; i++)
		order[i] = i;
	for (int i = 1; i < n; i++)
		for (int k = i; k > 0; k--) {
			const struct mig_instance *a = &in[order[k - 1]], *b = &in[order[k]];
			int ka = a->start >= 0 ? 100 : a->profile->size, kb = b->start >= 0 ? 100 : b->profile->size;
			if (kb <= ka)
				break;
			int t = order[k];
			order[k] = order[k - 1];
			order[k - 1] = t;
		}
	if (place(g, in, n, order, 0) < 0) {
		snprintf(why, why_size, "these profiles do not fit on one %s together", g->name);
		return APP_EINVAL;
	}
	return mig_layout_check(g, in, n, why, why_size);
}

int
mig_free_starts(const struct mig_gpu *g, const struct mig_instance *in, int n, const struct mig_profile *p, int *starts)
{
	struct mig_instance trial[MIG_MAX_INSTANCES + 1];
	char why[160];
	int found = 0;

	if (n >= MIG_MAX_INSTANCES)
		return 0;
	memcpy(trial, in, (size_t)n * sizeof(*in));
	for (int i = 0; i < p->n_starts; i++) {
		trial[n].profile = p;
		trial[n].start = p->starts[i];
		if (mig_layout_check(g, trial, n + 1, why, sizeof(why)) == 0)
			starts[found++] = p->starts[i];
	}
	return found;
}
