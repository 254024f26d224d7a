/* NVML by dlopen: inventory, MIG instances, applying a layout. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "gpu/nvml.h"
#include "gpu/nvml_abi.h"
#include "gpu/nvml_api.h"

#define NVML_SUCCESS 0
#define GI_PROFILE_INDEXES 10 /* NVML_GPU_INSTANCE_PROFILE_1_SLICE .. _1_SLICE_REV2 */

int
nvml_load(struct nvml_api *api, char *err)
{
	const char *path = getenv("PRIVAI_NVML_LIB");

	memset(api, 0, sizeof(*api));
	api->lib = dlopen(path != NULL ? path : "libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	if (api->lib == NULL)
		return app_fail(err, APP_ENOTFOUND, "no NVML (%s): a CPU-only node", dlerror());
	struct {
		void **slot;
		const char *sym;
	} syms[] = {
		{ (void **)&api->init, "nvmlInit_v2" },
		{ (void **)&api->shutdown, "nvmlShutdown" },
		{ (void **)&api->error_string, "nvmlErrorString" },
		{ (void **)&api->count, "nvmlDeviceGetCount_v2" },
		{ (void **)&api->by_index, "nvmlDeviceGetHandleByIndex_v2" },
		{ (void **)&api->by_uuid, "nvmlDeviceGetHandleByUUID" },
		{ (void **)&api->name, "nvmlDeviceGetName" },
		{ (void **)&api->uuid, "nvmlDeviceGetUUID" },
		{ (void **)&api->memory, "nvmlDeviceGetMemoryInfo" },
		{ (void **)&api->pci, "nvmlDeviceGetPciInfo_v3" },
		{ (void **)&api->mig_mode, "nvmlDeviceGetMigMode" },
		{ (void **)&api->gi_profile, "nvmlDeviceGetGpuInstanceProfileInfo" },
		{ (void **)&api->gi_list, "nvmlDeviceGetGpuInstances" },
		{ (void **)&api->gi_info, "nvmlGpuInstanceGetInfo" },
		{ (void **)&api->gi_create, "nvmlDeviceCreateGpuInstanceWithPlacement" },
		{ (void **)&api->gi_destroy, "nvmlGpuInstanceDestroy" },
		{ (void **)&api->ci_profile, "nvmlGpuInstanceGetComputeInstanceProfileInfo" },
		{ (void **)&api->ci_create, "nvmlGpuInstanceCreateComputeInstance" },
		{ (void **)&api->mig_max, "nvmlDeviceGetMaxMigDeviceCount" },
		{ (void **)&api->mig_by_index, "nvmlDeviceGetMigDeviceHandleByIndex" },
		{ (void **)&api->gi_id, "nvmlDeviceGetGpuInstanceId" },
	};
	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++)
		if ((*syms[i].slot = dlsym(api->lib, syms[i].sym)) == NULL) {
			dlclose(api->lib);
			return app_fail(err, APP_EUNSUPPORTED, "NVML lacks %s (driver too old?)", syms[i].sym);
		}
	nvmlReturn_t rc = api->init();
	if (rc != NVML_SUCCESS) {
		int r = app_fail(err, APP_EIO, "nvmlInit: %s", api->error_string(rc));
		dlclose(api->lib);
		return r;
	}
	return APP_OK;
}

int
nvml_open(struct nvml_api *api, unsigned int *count, char *err)
{
	int rc = nvml_load(api, err);

	if (rc != APP_OK)
		return rc;
	nvmlReturn_t r = api->count(count);
	if (r != NVML_SUCCESS) {
		rc = app_fail(err, APP_EIO, "nvmlDeviceGetCount: %s", api->error_string(r));
		nvml_unload(api);
	}
	return rc;
}

void
nvml_unload(struct nvml_api *api)
{
	api->shutdown();
	dlclose(api->lib);
}

/* The GPU instances of dev, with their handles when gis is not NULL. */
static int
instances(struct nvml_api *api, nvmlDevice_t dev, struct nvml_instance *out, nvmlGpuInstance_t *gis)
{
	int n = 0;

	for (unsigned p = 0; p < GI_PROFILE_INDEXES; p++) {
		nvmlGpuInstanceProfileInfo_t info;
		nvmlGpuInstance_t list[NVML_MAX_INSTANCES];
		unsigned int count = NVML_MAX_INSTANCES;
		if (api->gi_profile(dev, p, &info) != NVML_SUCCESS ||
		    api->gi_list(dev, info.id, list, &count) != NVML_SUCCESS)
			continue;
		for (unsigned i = 0; i < count && n < NVML_MAX_INSTANCES; i++) {
			nvmlGpuInstanceInfo_t gi;
			if (api->gi_info(list[i], &gi) != NVML_SUCCESS)
				continue;
			memset(&out[n], 0, sizeof(out[n]));
			out[n].gi_id = gi.id;
			out[n].profile_id = (int)gi.profileId;
			out[n].start = (int)gi.placement.start;
			out[n].size = (int)gi.placement.size;
			if (gis != NULL)
				gis[n] = list[i];
			n++;
		}
	}
	return n;
}

/* Each instance's MIG device UUID: a GPU instance with a compute
 * instance is a MIG device, found by index and matched by its GPU
 * instance id.  One without a compute instance keeps "". */
static void
instance_uuids(struct nvml_api *api, nvmlDevice_t dev, struct nvml_instance *in, int n)
{
	unsigned int max = 0;

	if (api->mig_max(dev, &max) != NVML_SUCCESS)
		return;
	for (unsigned k = 0; k < max; k++) {
		nvmlDevice_t mig;
		unsigned int gi;
		if (api->mig_by_index(dev, k, &mig) != NVML_SUCCESS || api->gi_id(mig, &gi) != NVML_SUCCESS)
			continue;
		for (int i = 0; i < n; i++)
			if (in[i].gi_id == gi && api->uuid(mig, in[i].uuid, sizeof(in[i].uuid)) != NVML_SUCCESS)
				in[i].uuid[0] = '\0';
	}
}

int
nvml_inventory(struct nvml_gpu *gpus, int max, int *n, char *err)
{
	struct nvml_api api;
	unsigned int count = 0;
	int rc;

	*n = 0;
	if ((rc = nvml_open(&api, &count, err)) != APP_OK)
		return rc;
	for (unsigned i = 0; i < count && *n < max; i++) {
		nvmlDevice_t dev;
		nvmlMemory_t mem;
		nvmlPciInfo_t pci;
		unsigned int cur, pend;
		struct nvml_gpu *g = &gpus[*n];
		memset(g, 0, sizeof(*g));
		if (api.by_index(i, &dev) != NVML_SUCCESS)
			continue;
		g->index = (int)i;
		api.name(dev, g->name, sizeof(g->name));
		api.uuid(dev, g->uuid, sizeof(g->uuid));
		if (api.memory(dev, &mem) == NVML_SUCCESS)
			g->memory_bytes = mem.total;
		if (api.pci(dev, &pci) == NVML_SUCCESS)
			snprintf(g->pci_bus_id, sizeof(g->pci_bus_id), "%s", pci.busId);
		if (api.mig_mode(dev, &cur, &pend) == NVML_SUCCESS) {
			g->mig_supported = 1;
			g->mig_current = cur == 1;
			g->mig_pending = pend == 1;
			if (g->mig_current) {
				g->n_instances = instances(&api, dev, g->inst, NULL);
				instance_uuids(&api, dev, g->inst, g->n_instances);
			}
		}
		(*n)++;
	}
	nvml_unload(&api);
	return APP_OK;
}

int
nvml_apply_layout(const char *uuid, const struct nvml_instance *want, int n, char *err)
{
	struct nvml_api api;
	struct nvml_instance have[NVML_MAX_INSTANCES];
	nvmlGpuInstance_t gis[NVML_MAX_INSTANCES];
	nvmlDevice_t dev;
	unsigned int cur, pend;
	nvmlReturn_t r;
	int rc;

	if ((rc = nvml_load(&api, err)) != APP_OK)
		return rc;
	if ((r = api.by_uuid(uuid, &dev)) != NVML_SUCCESS) {
		rc = app_fail(err, APP_ENOTFOUND, "GPU %s: %s", uuid, api.error_string(r));
		goto out;
	}
	if (api.mig_mode(dev, &cur, &pend) != NVML_SUCCESS || cur != 1) {
		rc = app_fail(err, APP_EUNSUPPORTED,
			      "GPU %s is not in MIG mode; enabling it needs a GPU reset, "
			      "which privai-tune does at boot (nvidia-smi -mig 1)",
			      uuid);
		goto out;
	}
	int nh = instances(&api, dev, have, gis);
	for (int i = 0; i < nh; i++)
		if ((r = api.gi_destroy(gis[i])) != NVML_SUCCESS) {
			rc = app_fail(err, APP_EBUSY, "GPU %s: cannot destroy the instance at slot %d (in use?): %s",
				      uuid, have[i].start, api.error_string(r));
			goto out;
		}
	for (int i = 0; i < n; i++) {
		nvmlGpuInstancePlacement_t pl = { (unsigned)want[i].start, (unsigned)want[i].size };
		nvmlGpuInstance_t gi;
		nvmlGpuInstanceInfo_t info;
		nvmlComputeInstanceProfileInfo_t ci;
		nvmlComputeInstance_t cih;
		if ((r = api.gi_create(dev, (unsigned)want[i].profile_id, &pl, &gi)) != NVML_SUCCESS) {
			rc = app_fail(err, APP_EIO, "GPU %s: creating profile %d at slot %d: %s", uuid,
				      want[i].profile_id, want[i].start, api.error_string(r));
			goto out;
		}
		/* one compute instance over the whole GPU instance, so it is usable */
		static const unsigned ci_index[8] = { 0, 0, 1, 2, 3, 3, 3, 4 }; /* by compute slices */
		unsigned slices = 0;
		for (unsigned p = 0; p < GI_PROFILE_INDEXES; p++) {
			nvmlGpuInstanceProfileInfo_t pi;
			if (api.gi_profile(dev, p, &pi) == NVML_SUCCESS && (int)pi.id == want[i].profile_id)
				slices = pi.sliceCount;
		}
		if (api.gi_info(gi, &info) != NVML_SUCCESS || slices == 0 || slices > 7 ||
		    (r = api.ci_profile(gi, ci_index[slices], 0, &ci)) != NVML_SUCCESS ||
		    (r = api.ci_create(gi, ci.id, &cih)) != NVML_SUCCESS) {
			rc = app_fail(err, APP_EIO, "GPU %s: creating the compute instance at slot %d: %s", uuid,
				      want[i].start, api.error_string(r));
			goto out;
		}
	}
	rc = APP_OK;
out:
	nvml_unload(&api);
	return rc;
}
