/*
 * The slice of NVML's ABI privai-admin uses, as NVML's header declares it
 * (shared by the loader, gpu/nvml.c, and the test double, tests/nvml_double).
 * Handles are pointers to opaque structs; only the double defines them.
 */
#ifndef PRIVAI_ADMIN_NVML_ABI_H
#define PRIVAI_ADMIN_NVML_ABI_H

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct nvmlGpuInstance_st *nvmlGpuInstance_t;
typedef struct nvmlComputeInstance_st *nvmlComputeInstance_t;
typedef struct {
	unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
	unsigned int gpu, memory; /* percent of the last sample period busy */
} nvmlUtilization_t;
typedef struct {
	char busIdLegacy[16];
	unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
	char busId[32];
} nvmlPciInfo_t;
typedef struct {
	unsigned int start, size;
} nvmlGpuInstancePlacement_t;
typedef struct {
	unsigned int id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount, copyEngineCount, decoderCount,
		encoderCount, jpegCount, ofaCount;
	unsigned long long memorySizeMB;
} nvmlGpuInstanceProfileInfo_t;
typedef struct {
	nvmlDevice_t device;
	unsigned int id, profileId;
	nvmlGpuInstancePlacement_t placement;
} nvmlGpuInstanceInfo_t;
typedef struct {
	unsigned int id, sliceCount, instanceCount, multiprocessorCount, sharedCopyEngineCount, sharedDecoderCount,
		sharedEncoderCount, sharedJpegCount, sharedOfaCount;
} nvmlComputeInstanceProfileInfo_t;

#endif
