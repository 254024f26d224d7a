/*
 * What the host's NVIDIA software and parts are: GPU models by PCI
 * device id (name, compute capability, NVLinks), the kernel driver's
 * version, the installed Fabric Manager package's, and the 64-bit MMIO
 * the GPUs' BARs need.  Shared by privai-tune's checks and privai-fabric.
 */
#ifndef PRIVAI_NVIDIA_H
#define PRIVAI_NVIDIA_H

#include <stddef.h>
#include <stdint.h>

struct nvidia_gpu_model {
	unsigned device; /* PCI device id, vendor 10de */
	const char *name;
	int sxm;     /* on an HGX board: NVLink through NVSwitches */
	int sm;      /* compute capability x 10, as NCCL writes it */
	int nvlinks; /* NVLink ports per GPU on the board (0: none) */
};

/* The model of a device id, or NULL when we do not know it. */
const struct nvidia_gpu_model *nvidia_gpu_model(unsigned device);

/* "550.54.15" of the loaded nvidia module.  0, or an APP_E* code when none is loaded. */
int nvidia_driver_version(const char *root, char *out, size_t size);

/* "550.54.15" of the installed nvidia-fabricmanager[-NNN] package, from
 * dpkg's status.  0, or an APP_E* code when none is installed (or status is unreadable). */
int nvidia_fm_package_version(const char *root, char *out, size_t size);

/* 64-bit MMIO the GPUs need: 128 GiB of BAR per GPU plus 32 GiB for NICs. */
uint64_t nvidia_mmio64_need_gib(int gpus);

/* A VM's 64-bit MMIO window (vSphere's pciPassthru.64bitMMIOSizeGB) for
 * devices whose 64-bit BARs add up to bar_bytes: that, plus a sixteenth
 * (at least 8 GiB) for alignment gaps, rounded up to 8 GiB.  Not to a
 * power of two: 8 H100s and their NICs need about 1 TB, and a 2 TB
 * window is itself a problem on some hosts. */
uint64_t nvidia_mmio64_window_gib(uint64_t bar_bytes);

/* The BAR estimate where the devices' own are unknown: a GPU's BAR1 (128
 * GiB on H100) and its two small BARs. */
#define NVIDIA_GPU_BAR64_BYTES ((128ULL << 30) + (32ULL << 20))
#define NVIDIA_SMALL_BAR64_BYTES (32ULL << 20) /* a ConnectX NIC's, an NVSwitch's */

#endif
