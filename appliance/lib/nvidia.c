/* NVIDIA parts and software on the host. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "hostfs.h"
#include "nvidia.h"

/* sm and NVLink counts from NVIDIA's data sheets: Hopper has 18 NVLink4
 * ports, Ampere 12 NVLink3; PCIe cards carry at most a bridge, which
 * does not go through NVSwitches. */
static const struct nvidia_gpu_model models[] = {
	{ 0x2330, "H100 SXM5 80GB", 1, 90, 18 },
	{ 0x2331, "H100 PCIe 80GB", 0, 90, 0 },
	{ 0x2335, "H200 SXM 141GB", 1, 90, 18 },
	{ 0x2339, "H100 SXM5 94GB", 1, 90, 18 },
	{ 0x20b0, "A100 SXM4 40GB", 1, 80, 12 },
	{ 0x20b2, "A100 SXM4 80GB", 1, 80, 12 },
	{ 0x20b5, "A100 PCIe 80GB", 0, 80, 0 },
	{ 0x20f1, "A100 PCIe 40GB", 0, 80, 0 },
	{ 0x26b5, "L40S", 0, 89, 0 },
};

const struct nvidia_gpu_model *
nvidia_gpu_model(unsigned device)
{
	for (size_t i = 0; i < sizeof(models) / sizeof(models[0]); i++)
		if (models[i].device == device)
			return &models[i];
	return NULL;
}

int
nvidia_driver_version(const char *root, char *out, size_t size)
{
	if (hostfs_read_line(root, "/sys/module/nvidia/version", out, size) < 0 || out[0] == '\0') {
		out[0] = '\0';
		return APP_ENOTFOUND;
	}
	return 0;
}

int
nvidia_fm_package_version(const char *root, char *out, size_t size)
{
	char *text = hostfs_read_text(root, "/var/lib/dpkg/status", 64 << 20, NULL), *stanza, *next;
	int found = -1;

	out[0] = '\0';
	if (text == NULL)
		return APP_ENOTFOUND;
	for (stanza = text; stanza != NULL && found < 0; stanza = next) {
		char *v, *installed;
		stanza += strspn(stanza, "\n");
		if ((next = strstr(stanza, "\n\n")) != NULL)
			*next++ = '\0';
		if (strncmp(stanza, "Package: nvidia-fabricmanager", 29) != 0 ||
		    (stanza[29] != '-' && stanza[29] != '\n'))
			continue;
		installed = strstr(stanza, "\nStatus: install ok installed");
		if (installed != NULL && (v = strstr(stanza, "\nVersion: ")) != NULL) {
			v += 10;
			snprintf(out, size, "%.*s", (int)strcspn(v, "-\n"), v);
			found = out[0] ? 0 : -1;
		}
	}
	free(text);
	return found;
}

uint64_t
nvidia_mmio64_need_gib(int gpus)
{
	return (uint64_t)(gpus > 0 ? gpus : 0) * 128 + 32;
}

uint64_t
nvidia_mmio64_window_gib(uint64_t bar_bytes)
{
	const uint64_t gib = 1ULL << 30, step = 8 * gib;
	uint64_t headroom = bar_bytes / 16 > step ? bar_bytes / 16 : step;

	return (bar_bytes + headroom + step - 1) / step * step / gib;
}
