/*
 * The NVML entry points privai-admin calls, resolved by dlopen (gpu/nvml.c)
 * and shared by the inventory and the telemetry reader.
 */
#ifndef PRIVAI_ADMIN_NVML_API_H
#define PRIVAI_ADMIN_NVML_API_H

#include "gpu/nvml_abi.h"

struct nvml_api {
	void *lib;
	nvmlReturn_t (*init)(void);
	nvmlReturn_t (*shutdown)(void);
	const char *(*error_string)(nvmlReturn_t);
	nvmlReturn_t (*count)(unsigned int *);
	nvmlReturn_t (*by_index)(unsigned int, nvmlDevice_t *);
	nvmlReturn_t (*by_uuid)(const char *, nvmlDevice_t *);
	nvmlReturn_t (*name)(nvmlDevice_t, char *, unsigned int);
	nvmlReturn_t (*uuid)(nvmlDevice_t, char *, unsigned int);
	nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t *);
	nvmlReturn_t (*pci)(nvmlDevice_t, nvmlPciInfo_t *);
	nvmlReturn_t (*mig_mode)(nvmlDevice_t, unsigned int *, unsigned int *);
	nvmlReturn_t (*gi_profile)(nvmlDevice_t, unsigned int, nvmlGpuInstanceProfileInfo_t *);
	nvmlReturn_t (*gi_list)(nvmlDevice_t, unsigned int, nvmlGpuInstance_t *, unsigned int *);
	nvmlReturn_t (*gi_info)(nvmlGpuInstance_t, nvmlGpuInstanceInfo_t *);
	nvmlReturn_t (*gi_create)(nvmlDevice_t, unsigned int, const nvmlGpuInstancePlacement_t *, nvmlGpuInstance_t *);
	nvmlReturn_t (*gi_destroy)(nvmlGpuInstance_t);
	nvmlReturn_t (*ci_profile)(nvmlGpuInstance_t, unsigned int, unsigned int, nvmlComputeInstanceProfileInfo_t *);
	nvmlReturn_t (*ci_create)(nvmlGpuInstance_t, unsigned int, nvmlComputeInstance_t *);
	nvmlReturn_t (*mig_max)(nvmlDevice_t, unsigned int *);
	nvmlReturn_t (*mig_by_index)(nvmlDevice_t, unsigned int, nvmlDevice_t *);
	nvmlReturn_t (*gi_id)(nvmlDevice_t, unsigned int *);
};

/* Open NVML (PRIVAI_NVML_LIB, else libnvidia-ml.so.1) and initialise it:
 * APP_ENOTFOUND without the library (a CPU-only node). */
int nvml_load(struct nvml_api *api, char *err);
/* nvml_load, then the number of GPUs; unloaded again when that fails. */
int nvml_open(struct nvml_api *api, unsigned int *count, char *err);
void nvml_unload(struct nvml_api *api);

#endif
