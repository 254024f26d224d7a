/*
 * GPU telemetry through NVML: utilization, memory, temperature, power and
 * ECC error counts of each GPU, and the memory of each MIG instance (NVML
 * has no utilization per MIG device: that needs DCGM's profiling
 * metrics).  The calls are looked up one by one, so a driver lacking one
 * gives NAN for it rather than no telemetry at all.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "status.h"
#include "gpu/nvml.h"
#include "gpu/nvml_api.h"

#define NVML_SUCCESS 0
#define NVML_TEMPERATURE_GPU 0
#define NVML_MEMORY_ERROR_TYPE_CORRECTED 0
#define NVML_MEMORY_ERROR_TYPE_UNCORRECTED 1
#define NVML_VOLATILE_ECC 0

struct telemetry_api {
	nvmlReturn_t (*util)(nvmlDevice_t, nvmlUtilization_t *);
	nvmlReturn_t (*temp)(nvmlDevice_t, int, unsigned int *);
	nvmlReturn_t (*power)(nvmlDevice_t, unsigned int *); /* milliwatts */
	nvmlReturn_t (*ecc)(nvmlDevice_t, int, int, unsigned long long *);
};

static void
reading_init(struct nvml_reading *r)
{
	memset(r, 0, sizeof(*r));
	r->util_pct = r->mem_util_pct = r->mem_used_bytes = r->mem_total_bytes = NAN;
	r->temp_c = r->power_w = r->ecc_corrected = r->ecc_uncorrected = NAN;
}

static void
read_memory(struct nvml_api *api, nvmlDevice_t dev, struct nvml_reading *r)
{
	nvmlMemory_t mem;

	if (api->memory(dev, &mem) == NVML_SUCCESS) {
		r->mem_used_bytes = (double)mem.used;
		r->mem_total_bytes = (double)mem.total;
	}
}

static void
read_gpu(struct nvml_api *api, const struct telemetry_api *t, nvmlDevice_t dev, struct nvml_reading *r)
{
	nvmlUtilization_t u;
	unsigned int v;
	unsigned long long n;

	read_memory(api, dev, r);
	if (t->util != NULL && t->util(dev, &u) == NVML_SUCCESS) {
		r->util_pct = u.gpu;
		r->mem_util_pct = u.memory;
	}
	if (t->temp != NULL && t->temp(dev, NVML_TEMPERATURE_GPU, &v) == NVML_SUCCESS)
		r->temp_c = v;
	if (t->power != NULL && t->power(dev, &v) == NVML_SUCCESS)
		r->power_w = v / 1000.0;
	/* NOT_SUPPORTED where ECC is off: then NAN, not a count of 0 */
	if (t->ecc != NULL && t->ecc(dev, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC, &n) == NVML_SUCCESS)
		r->ecc_corrected = (double)n;
	if (t->ecc != NULL && t->ecc(dev, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &n) == NVML_SUCCESS)
		r->ecc_uncorrected = (double)n;
}

/* The MIG devices of dev after out[*n - 1], each with its memory. */
static void
read_migs(struct nvml_api *api, nvmlDevice_t dev, const char *parent, struct nvml_reading *out, int max, int *n)
{
	unsigned int cur, pend, count = 0;

	if (api->mig_mode(dev, &cur, &pend) != NVML_SUCCESS || cur != 1 || api->mig_max(dev, &count) != NVML_SUCCESS)
		return;
	for (unsigned k = 0; k < count && *n < max; k++) {
		nvmlDevice_t mig;
		struct nvml_reading *r = &out[*n];
		if (api->mig_by_index(dev, k, &mig) != NVML_SUCCESS)
			continue;
		reading_init(r);
		if (api->uuid(mig, r->uuid, sizeof(r->uuid)) != NVML_SUCCESS)
			continue;
		snprintf(r->parent, sizeof(r->parent), "%s", parent);
		read_memory(api, mig, r);
		(*n)++;
	}
}

int
nvml_read_all(struct nvml_reading *out, int max, int *n, char *err)
{
	struct nvml_api api;
	struct telemetry_api t;
	unsigned int count = 0;
	int rc;

	*n = 0;
	if ((rc = nvml_open(&api, &count, err)) != APP_OK)
		return rc;
	*(void **)&t.util = dlsym(api.lib, "nvmlDeviceGetUtilizationRates");
	*(void **)&t.temp = dlsym(api.lib, "nvmlDeviceGetTemperature");
	*(void **)&t.power = dlsym(api.lib, "nvmlDeviceGetPowerUsage");
	*(void **)&t.ecc = dlsym(api.lib, "nvmlDeviceGetTotalEccErrors");
	for (unsigned i = 0; i < count && *n < max; i++) {
		nvmlDevice_t dev;
		struct nvml_reading *g = &out[*n];
		reading_init(g);
		if (api.by_index(i, &dev) != NVML_SUCCESS || api.uuid(dev, g->uuid, sizeof(g->uuid)) != NVML_SUCCESS)
			continue;
		read_gpu(&api, &t, dev, g);
		(*n)++;
		read_migs(&api, dev, g->uuid, out, max, n);
	}
	nvml_unload(&api);
	return APP_OK;
}
