/*
 * A recorded NVML double: a shared library answering the NVML calls
 * privai-admin makes for a simulated HGX H100 node (8 x "NVIDIA H100 80GB
 * HBM3" with the bus ids, memory and MIG profile table such a node
 * reports).  Loaded with PRIVAI_NVML_LIB=.../libnvml-double.so.
 *   PRIVAI_NVML_DOUBLE_MIG=0|1    MIG mode of every GPU (default 1)
 *   PRIVAI_NVML_DOUBLE_NODE=N     which simulated node (0-9; default 0): the
 *                                 digit in every GPU UUID, so two nodes differ
 *   PRIVAI_NVML_DOUBLE_STATE=FILE GPU instances kept across processes
 *                                 ("gpu profile_id start size" lines);
 *                                 removing it is a reboot, which loses them
 * Placements are checked the way the driver checks them: a start the
 * profile does not allow is NVML_ERROR_INVALID_ARGUMENT, an overlap
 * NVML_ERROR_INSUFFICIENT_RESOURCES.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/nvml_abi.h"

#define N_GPUS 8
#define MAX_GI 7

enum {
	OK = 0,
	UNINITIALIZED = 1,
	INVALID_ARGUMENT = 2,
	NOT_SUPPORTED = 3,
	INSUFFICIENT_SIZE = 7,
	INSUFFICIENT_RESOURCES = 23,
	NOT_FOUND = 6
};

struct nvmlGpuInstance_st {
	int used;
	unsigned id, profile_id, start, size;
	struct nvmlDevice_st *dev;
};

struct nvmlDevice_st {
	int index;
	struct nvmlGpuInstance_st gis[MAX_GI];
	struct nvmlDevice_st *parent; /* a MIG device: its GPU, and the GPU instance it is */
	unsigned gi_id, gi_start;
};

/* an H100 80GB HBM3's GPU instance profiles, by NVML profile index */
static const struct {
	int index, id, slices, size, max;
	unsigned starts_mask;
	unsigned long long mb;
} profiles[] = {
	{ 0, 19, 1, 1, 7, 0x7f, 9856 },  { 1, 14, 2, 2, 3, 0x15, 19968 }, { 2, 9, 3, 4, 2, 0x11, 40192 },
	{ 3, 5, 4, 4, 1, 0x01, 40192 },  { 4, 0, 7, 8, 1, 0x01, 80768 },  { 7, 20, 1, 1, 1, 0x7f, 9856 },
	{ 9, 15, 1, 2, 4, 0x55, 19968 },
};
static const unsigned bus[N_GPUS] = { 0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb };

static struct nvmlDevice_st devs[N_GPUS];
static struct nvmlDevice_st mig_devs[N_GPUS][MAX_GI];
static int inited;

static int
mig_on(void)
{
	const char *m = getenv("PRIVAI_NVML_DOUBLE_MIG");
	return m == NULL || strcmp(m, "0") != 0;
}

static int
profile_by_id(unsigned id)
{
	for (size_t i = 0; i < sizeof(profiles) / sizeof(profiles[0]); i++)
		if ((unsigned)profiles[i].id == id)
			return (int)i;
	return -1;
}

static void
save(void)
{
	const char *path = getenv("PRIVAI_NVML_DOUBLE_STATE");
	if (path == NULL)
		return;
	FILE *fp = fopen(path, "w");
	if (fp == NULL)
		return;
	for (int d = 0; d < N_GPUS; d++)
		for (int g = 0; g < MAX_GI; g++)
			if (devs[d].gis[g].used)
				fprintf(fp, "%d %u %u %u\n", d, devs[d].gis[g].profile_id, devs[d].gis[g].start,
					devs[d].gis[g].size);
	fclose(fp);
}

static void
load(void)
{
	const char *path = getenv("PRIVAI_NVML_DOUBLE_STATE");
	unsigned d, p, s, z;
	FILE *fp = path != NULL ? fopen(path, "r") : NULL;

	memset(devs, 0, sizeof(devs));
	for (int i = 0; i < N_GPUS; i++)
		devs[i].index = i;
	if (fp == NULL)
		return;
	while (fscanf(fp, "%u %u %u %u", &d, &p, &s, &z) == 4)
		for (int g = 0; d < N_GPUS && g < MAX_GI; g++)
			if (!devs[d].gis[g].used) {
				devs[d].gis[g] = (struct nvmlGpuInstance_st){ 1, (unsigned)g + 1, p, s, z, &devs[d] };
				break;
			}
	fclose(fp);
}

int
nvmlInit_v2(void)
{
	load();
	inited = 1;
	return OK;
}
int
nvmlShutdown(void)
{
	inited = 0;
	return OK;
}

const char *
nvmlErrorString(int r)
{
	switch (r) {
	case OK:
		return "Success";
	case INVALID_ARGUMENT:
		return "Invalid Argument";
	case NOT_SUPPORTED:
		return "Not Supported";
	case INSUFFICIENT_RESOURCES:
		return "Insufficient Resources";
	case NOT_FOUND:
		return "Not Found";
	default:
		return "Unknown Error";
	}
}

int
nvmlDeviceGetCount_v2(unsigned int *n)
{
	if (!inited)
		return UNINITIALIZED;
	*n = N_GPUS;
	return OK;
}

int
nvmlDeviceGetHandleByIndex_v2(unsigned int i, struct nvmlDevice_st **d)
{
	if (!inited)
		return UNINITIALIZED;
	if (i >= N_GPUS)
		return INVALID_ARGUMENT;
	*d = &devs[i];
	return OK;
}

static void
uuid_of(int i, char *out, unsigned int n)
{
	const char *node = getenv("PRIVAI_NVML_DOUBLE_NODE");
	int k = node != NULL && node[0] >= '0' && node[0] <= '9' ? node[0] - '0' : 0;
	snprintf(out, n, "GPU-5e1a0c3d-7b2f-4c11-9a0e-0000000%d000%d", k, i);
}

int
nvmlDeviceGetHandleByUUID(const char *uuid, struct nvmlDevice_st **d)
{
	char u[96];
	for (int i = 0; i < N_GPUS; i++) {
		uuid_of(i, u, sizeof(u));
		if (strcmp(u, uuid) == 0) {
			*d = &devs[i];
			return OK;
		}
	}
	return NOT_FOUND;
}

int
nvmlDeviceGetName(struct nvmlDevice_st *d, char *s, unsigned int n)
{
	snprintf(s, n, "NVIDIA H100 80GB HBM3");
	return OK;
}
/* A MIG device's UUID is fixed by its GPU and where its instance starts,
 * so it stays the same while the instance lives, as the driver's do. */
int
nvmlDeviceGetUUID(struct nvmlDevice_st *d, char *s, unsigned int n)
{
	if (d->parent == NULL) {
		uuid_of(d->index, s, n);
		return OK;
	}
	const char *node = getenv("PRIVAI_NVML_DOUBLE_NODE");
	int k = node != NULL && node[0] >= '0' && node[0] <= '9' ? node[0] - '0' : 0;
	snprintf(s, n, "MIG-a41c6e2b-93d0-5f7e-8c1b-00%d0%d0000%d0%u", k, d->parent->index, d->parent->index,
		 d->gi_start);
	return OK;
}

int
nvmlDeviceGetMaxMigDeviceCount(struct nvmlDevice_st *d, unsigned int *count)
{
	*count = mig_on() && d->parent == NULL ? MAX_GI : 0;
	return mig_on() ? OK : NOT_SUPPORTED;
}

/* The index-th GPU instance in use is MIG device index (each has its
 * one compute instance here). */
int
nvmlDeviceGetMigDeviceHandleByIndex(struct nvmlDevice_st *d, unsigned int index, struct nvmlDevice_st **out)
{
	unsigned k = 0;
	if (!mig_on() || d->parent != NULL)
		return NOT_SUPPORTED;
	for (int g = 0; g < MAX_GI; g++)
		if (d->gis[g].used && k++ == index) {
			struct nvmlDevice_st *m = &mig_devs[d->index][g];
			memset(m, 0, sizeof(*m));
			m->index = d->index;
			m->parent = d;
			m->gi_id = d->gis[g].id;
			m->gi_start = d->gis[g].start;
			*out = m;
			return OK;
		}
	return NOT_FOUND;
}

int
nvmlDeviceGetGpuInstanceId(struct nvmlDevice_st *d, unsigned int *id)
{
	if (d->parent == NULL)
		return INVALID_ARGUMENT;
	*id = d->gi_id;
	return OK;
}

/* A MIG device's memory is its profile's; a quarter of it in use. */
int
nvmlDeviceGetMemoryInfo(struct nvmlDevice_st *d, nvmlMemory_t *m)
{
	m->total = 85520809984ull; /* 81559 MiB, as an H100 80GB HBM3 reports */
	m->used = 609222656ull + (unsigned long long)d->index * 1073741824ull;
	if (d->parent != NULL)
		for (int g = 0; g < MAX_GI; g++)
			if (d->parent->gis[g].used && d->parent->gis[g].id == d->gi_id) {
				int p = profile_by_id(d->parent->gis[g].profile_id);
				m->total = p >= 0 ? profiles[p].mb << 20 : 0;
				m->used = m->total / 4;
			}
	m->free = m->total - m->used;
	return OK;
}

/* Telemetry, recorded per GPU so a test can tell them apart: GPU i is
 * 20 + 10 i % busy, 31 + i degrees C, 70 + i W; GPU 7 has had 2
 * uncorrected ECC errors, GPU i i corrected ones.  A MIG device has no
 * utilization, temperature or power of its own, as with the driver. */
int
nvmlDeviceGetUtilizationRates(struct nvmlDevice_st *d, nvmlUtilization_t *u)
{
	if (d->parent != NULL)
		return NOT_SUPPORTED;
	u->gpu = 20 + 10 * (unsigned)d->index;
	u->memory = 5 + (unsigned)d->index;
	return OK;
}

int
nvmlDeviceGetTemperature(struct nvmlDevice_st *d, int sensor, unsigned int *t)
{
	if (d->parent != NULL || sensor != 0)
		return NOT_SUPPORTED;
	*t = 31 + (unsigned)d->index;
	return OK;
}

int
nvmlDeviceGetPowerUsage(struct nvmlDevice_st *d, unsigned int *mw)
{
	if (d->parent != NULL)
		return NOT_SUPPORTED;
	*mw = 70000 + 1000 * (unsigned)d->index;
	return OK;
}

int
nvmlDeviceGetTotalEccErrors(struct nvmlDevice_st *d, int type, int counter, unsigned long long *n)
{
	if (d->parent != NULL || counter != 0)
		return NOT_SUPPORTED;
	*n = type == 0 ? (unsigned long long)d->index : d->index == 7 ? 2 : 0;
	return OK;
}

int
nvmlDeviceGetPciInfo_v3(struct nvmlDevice_st *d, nvmlPciInfo_t *p)
{
	memset(p, 0, sizeof(*p));
	p->bus = bus[d->index];
	p->pciDeviceId = 0x233010de;
	snprintf(p->busId, sizeof(p->busId), "00000000:%02X:00.0", bus[d->index]);
	snprintf(p->busIdLegacy, sizeof(p->busIdLegacy), "0000:%02X:00.0", bus[d->index]);
	return OK;
}

int
nvmlDeviceGetMigMode(struct nvmlDevice_st *d, unsigned int *cur, unsigned int *pend)
{
	*cur = *pend = (unsigned)mig_on();
	return OK;
}

int
nvmlDeviceGetGpuInstanceProfileInfo(struct nvmlDevice_st *d, unsigned int index, nvmlGpuInstanceProfileInfo_t *info)
{
	for (size_t i = 0; i < sizeof(profiles) / sizeof(profiles[0]); i++)
		if ((unsigned)profiles[i].index == index) {
			memset(info, 0, sizeof(*info));
			info->id = (unsigned)profiles[i].id;
			info->sliceCount = (unsigned)profiles[i].slices;
			info->instanceCount = (unsigned)profiles[i].max;
			info->multiprocessorCount = 16u * (unsigned)profiles[i].slices;
			info->memorySizeMB = profiles[i].mb;
			return OK;
		}
	return index < 10 ? NOT_SUPPORTED : INVALID_ARGUMENT;
}

int
nvmlDeviceGetGpuInstances(struct nvmlDevice_st *d, unsigned int profile_id, struct nvmlGpuInstance_st **out,
			  unsigned int *count)
{
	unsigned n = 0;
	if (!mig_on())
		return NOT_SUPPORTED;
	for (int g = 0; g < MAX_GI; g++)
		if (d->gis[g].used && d->gis[g].profile_id == profile_id) {
			if (n >= *count)
				return INSUFFICIENT_SIZE;
			out[n++] = &d->gis[g];
		}
	*count = n;
	return OK;
}

int
nvmlGpuInstanceGetInfo(struct nvmlGpuInstance_st *g, nvmlGpuInstanceInfo_t *info)
{
	if (!g->used)
		return INVALID_ARGUMENT;
	info->device = g->dev;
	info->id = g->id;
	info->profileId = g->profile_id;
	info->placement.start = g->start;
	info->placement.size = g->size;
	return OK;
}

int
nvmlDeviceCreateGpuInstanceWithPlacement(struct nvmlDevice_st *d, unsigned int profile_id,
					 const nvmlGpuInstancePlacement_t *pl, struct nvmlGpuInstance_st **out)
{
	int p = profile_by_id(profile_id), count = 0, free_slot = -1;
	if (!mig_on())
		return NOT_SUPPORTED;
	if (p < 0 || pl->start > 7 || !(profiles[p].starts_mask & (1u << pl->start)) ||
	    pl->size != (unsigned)profiles[p].size)
		return INVALID_ARGUMENT;
	for (int g = 0; g < MAX_GI; g++) {
		struct nvmlGpuInstance_st *x = &d->gis[g];
		if (!x->used) {
			if (free_slot < 0)
				free_slot = g;
			continue;
		}
		if (x->profile_id == profile_id)
			count++;
		if (pl->start < x->start + x->size && x->start < pl->start + pl->size)
			return INSUFFICIENT_RESOURCES;
	}
	if (free_slot < 0 || count >= profiles[p].max)
		return INSUFFICIENT_RESOURCES;
	d->gis[free_slot] =
		(struct nvmlGpuInstance_st){ 1, (unsigned)free_slot + 1, profile_id, pl->start, pl->size, d };
	*out = &d->gis[free_slot];
	save();
	return OK;
}

int
nvmlGpuInstanceDestroy(struct nvmlGpuInstance_st *g)
{
	if (!g->used)
		return INVALID_ARGUMENT;
	g->used = 0;
	save();
	return OK;
}

int
nvmlGpuInstanceGetComputeInstanceProfileInfo(struct nvmlGpuInstance_st *g, unsigned int profile, unsigned int eng,
					     nvmlComputeInstanceProfileInfo_t *info)
{
	memset(info, 0, sizeof(*info));
	info->id = profile;
	info->sliceCount = profile + 1;
	info->instanceCount = 1;
	return g->used ? OK : INVALID_ARGUMENT;
}

int
nvmlGpuInstanceCreateComputeInstance(struct nvmlGpuInstance_st *g, unsigned int profile_id, void **ci)
{
	*ci = g;
	return g->used ? OK : INVALID_ARGUMENT;
}
