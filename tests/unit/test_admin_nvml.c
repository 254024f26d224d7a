/* NVML through dlopen, against the recorded double of an HGX H100 node:
 * inventory, MIG instances, applying a layout, losing it at a reboot. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testlib.h"
#include "status.h"
#include "gpu/mig.h"
#include "gpu/nvml.h"

int
main(void)
{
	static struct nvml_gpu g[NVML_MAX_GPUS];
	char err[APP_ERR_LEN], lib[512], state[64];
	const char *build = getenv("BUILD") ? getenv("BUILD") : "build";
	int n;

	setenv("PRIVAI_NVML_LIB", "/nonexistent/libnvidia-ml.so.1", 1);
	CHECK(nvml_inventory(g, NVML_MAX_GPUS, &n, err) == APP_ENOTFOUND && n == 0 && strstr(err, "CPU-only"),
	      "no NVML: a CPU-only node (%s)", err);

	snprintf(lib, sizeof(lib), "%s/libnvml-double.so", build);
	snprintf(state, sizeof(state), "/tmp/privai-nvml-%d.state", (int)getpid());
	setenv("PRIVAI_NVML_LIB", lib, 1);
	setenv("PRIVAI_NVML_DOUBLE_STATE", state, 1);
	unlink(state);
	CHECK(nvml_inventory(g, NVML_MAX_GPUS, &n, err) == 0 && n == 8, "8 GPUs (%s)", err);
	CHECK(strcmp(g[0].name, "NVIDIA H100 80GB HBM3") == 0 && g[0].memory_bytes == 85520809984ull &&
		      strcmp(g[0].pci_bus_id, "00000000:18:00.0") == 0 && strncmp(g[7].uuid, "GPU-", 4) == 0 &&
		      strcmp(g[7].pci_bus_id, "00000000:DB:00.0") == 0,
	      "names, memory, bus ids, uuids");
	CHECK(g[3].mig_supported && g[3].mig_current && g[3].n_instances == 0, "MIG on, no instances yet");
	CHECK(mig_gpu_for_device(g[0].name, g[0].memory_bytes) == mig_gpu_find("H100-80GB"), "the H100 table");

	struct nvml_instance want[3] = { { .profile_id = 9, .start = 0, .size = 4 },
					 { .profile_id = 14, .start = 4, .size = 2 },
					 { .profile_id = 19, .start = 6, .size = 1 } };
	CHECK(nvml_apply_layout(g[2].uuid, want, 3, err) == 0, "apply 3g@0 2g@4 1g@6: %s", err);
	CHECK(nvml_inventory(g, NVML_MAX_GPUS, &n, err) == 0 && g[2].n_instances == 3 && g[1].n_instances == 0,
	      "read back (%d instances)", g[2].n_instances);
	int seen = 0;
	for (int i = 0; i < g[2].n_instances; i++)
		for (int k = 0; k < 3; k++)
			seen += g[2].inst[i].profile_id == want[k].profile_id && g[2].inst[i].start == want[k].start &&
				g[2].inst[i].size == want[k].size;
	CHECK(seen == 3, "the same placements");
	/* each instance is a MIG device with its own UUID, the one a placement names */
	int uuids = 0;
	for (int i = 0; i < g[2].n_instances; i++)
		for (int k = 0; k < i; k++)
			uuids += strcmp(g[2].inst[i].uuid, g[2].inst[k].uuid) == 0;
	CHECK(uuids == 0 && strncmp(g[2].inst[0].uuid, "MIG-", 4) == 0 && strncmp(g[2].inst[2].uuid, "MIG-", 4) == 0,
	      "three MIG UUIDs, all different (%s)", g[2].inst[0].uuid);
	struct nvml_instance again[2] = { { .profile_id = 0, .start = 0, .size = 8 } };
	CHECK(nvml_apply_layout(g[2].uuid, again, 1, err) == 0 && nvml_inventory(g, NVML_MAX_GPUS, &n, err) == 0 &&
		      g[2].n_instances == 1 && g[2].inst[0].profile_id == 0,
	      "re-apply replaces: one 7g");
	struct nvml_instance clash[2] = { { .profile_id = 5, .start = 0, .size = 4 },
					  { .profile_id = 9, .start = 0, .size = 4 } };
	CHECK(nvml_apply_layout(g[4].uuid, clash, 2, err) != 0 && strstr(err, "slot 0"),
	      "the driver refuses an overlap: %s", err);
	CHECK(nvml_apply_layout("GPU-nope", want, 1, err) == APP_ENOTFOUND, "unknown GPU: %s", err);
	unlink(state); /* a reboot: MIG instances are gone */
	CHECK(nvml_inventory(g, NVML_MAX_GPUS, &n, err) == 0 && g[2].n_instances == 0, "lost at a reboot");
	setenv("PRIVAI_NVML_DOUBLE_MIG", "0", 1);
	CHECK(nvml_apply_layout(g[2].uuid, want, 3, err) == APP_EUNSUPPORTED && strstr(err, "not in MIG mode"),
	      "MIG off: refused, mode never changed: %s", err);
	CHECK(nvml_inventory(g, NVML_MAX_GPUS, &n, err) == 0 && !g[0].mig_current, "MIG off read back");
	unlink(state);
	return test_summary();
}
