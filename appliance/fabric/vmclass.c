/* The vSphere VM class report. */
#include <stdio.h>
#include <string.h>

#include "nvidia.h"
#include "vmclass.h"

static void
add_device(cJSON *list, const struct fabric *f, int dev, const char *role, const char *name)
{
	cJSON *o = fabric_dev_json(f, dev);

	cJSON_AddNumberToObject(o, "order", cJSON_GetArraySize(list));
	cJSON_AddStringToObject(o, "role", role);
	cJSON_AddStringToObject(o, "name", name);
	cJSON_AddItemToArray(list, o);
}

static void
setting(cJSON *list, const char *key, const char *value, const char *why)
{
	cJSON *o = cJSON_CreateObject();

	cJSON_AddStringToObject(o, "key", key);
	cJSON_AddStringToObject(o, "value", value);
	cJSON_AddStringToObject(o, "why", why);
	cJSON_AddItemToArray(list, o);
}

cJSON *
vmclass_json(const struct fabric *f, int shared_nvswitch)
{
	const struct topo *t = &f->topo;
	cJSON *o = cJSON_CreateObject(), *devices, *settings, *warnings;
	int nic_listed[TOPO_MAX_NICS] = { 0 };
	char name[64], size[24];

	cJSON_AddStringToObject(o, "mode",
				t->n_nvswitches == 0 ? "no NVSwitch"
				: shared_nvswitch ? "shared NVSwitch (the switches stay with the host's Fabric Manager)"
						  : "full passthrough (the VM owns the board and runs Fabric Manager)");
	devices = cJSON_AddArrayToObject(o, "devices");
	settings = cJSON_AddArrayToObject(o, "settings");
	warnings = cJSON_AddArrayToObject(o, "warnings");
	for (int g = 0; g < t->n_gpus; g++) {
		const struct nvidia_gpu_model *m = nvidia_gpu_model(t->bus.dev[t->gpu[g]].device);
		int n = t->gpu_nic[g];
		snprintf(name, sizeof(name), "GPU%d %s", g, m ? m->name : "NVIDIA GPU");
		add_device(devices, f, t->gpu[g], "gpu", name);
		if (n >= 0) {
			snprintf(name, sizeof(name), "NIC%d %s", g, topo_nic_name(t, n));
			add_device(devices, f, t->nic[n], "nic", name);
			nic_listed[n] = 1;
			if (t->gpu_pairing[g] != TOPO_PAIR_SWITCH && !t->virtual_pcie)
				fabric_json_addf(warnings,
						 "%s shares no PCIe switch with its NIC %s: GPUDirect RDMA between "
						 "them crosses "
						 "the CPU",
						 t->bus.dev[t->gpu[g]].bdf, t->bus.dev[t->nic[n]].bdf);
			if (t->bus.dev[t->nic[n]].ats_ctrl == 0)
				fabric_json_addf(warnings,
						 "NIC %s has ATS off: with RelaxACSforP2P its peer-to-peer traffic "
						 "still goes "
						 "through the root complex; enable ATS in the NIC's firmware "
						 "(mlxconfig ATS_ENABLED=1)",
						 t->bus.dev[t->nic[n]].bdf);
		} else if (t->n_nics > 0) {
			fabric_json_addf(warnings,
					 "GPU %s has no NIC of its own: it reaches other nodes through another GPU's "
					 "NIC",
					 t->bus.dev[t->gpu[g]].bdf);
		}
	}
	for (int n = 0; n < t->n_nics; n++)
		if (!nic_listed[n]) {
			snprintf(name, sizeof(name), "NIC %s (no GPU)", topo_nic_name(t, n));
			add_device(devices, f, t->nic[n], "nic", name);
		}
	if (!shared_nvswitch)
		for (int s = 0; s < t->n_nvswitches; s++) {
			snprintf(name, sizeof(name), "NVSwitch%d", s);
			add_device(devices, f, t->nvswitch[s], "nvswitch", name);
		}
	if (t->n_gpus > 0) {
		snprintf(size, sizeof(size), "%llu", (unsigned long long)nvidia_mmio64_vm_size_gib(t->n_gpus));
		setting(settings, "pciPassthru.use64bitMMIO", "TRUE", "the GPUs' BARs map above 4 GiB");
		setting(settings, "pciPassthru.64bitMMIOSizeGB", size,
			"128 GiB per GPU plus 32 GiB for NICs, rounded up to a power of two");
	}
	if (t->n_gpus > 1 || (t->n_gpus > 0 && t->n_nics > 0)) {
		setting(settings, "pciPassthru.allowP2P", "TRUE", "GPU-GPU and GPU-NIC peer-to-peer inside the VM");
		setting(settings, "pciPassthru.RelaxACSforP2P", "TRUE",
			"peer-to-peer through the PCIe switch with ATS instead of up to the root complex");
	}
	if (t->n_gpus > 0 && t->virtual_pcie == 0 && t->n_nics > 0)
		cJSON_AddStringToObject(o, "nccl_topology",
					"in the guest, run privai-fabric topology --write /etc/privai/nccl-topo.xml: "
					"the guest "
					"sees the devices in this order on a flat bus");
	if (t->gpus_seen > TOPO_MAX_GPUS)
		fabric_json_addf(warnings,
				 "%d GPUs on the bus, more than one node carries; only the first %d are listed",
				 t->gpus_seen, TOPO_MAX_GPUS);
	return o;
}

void
vmclass_print(const cJSON *report, FILE *out)
{
	const cJSON *d, *s, *w;

	fprintf(out, "vSphere VM class: %s\n\nPCI devices, in this order:\n",
		cJSON_GetStringValue(cJSON_GetObjectItem(report, "mode")));
	cJSON_ArrayForEach (d, cJSON_GetObjectItem(report, "devices")) {
		const char *sw = cJSON_GetStringValue(cJSON_GetObjectItem(d, "switch"));
		fprintf(out, "  %2d  %-28s %s  %s  NUMA %d%s%s\n", cJSON_GetObjectItem(d, "order")->valueint,
			cJSON_GetStringValue(cJSON_GetObjectItem(d, "name")),
			cJSON_GetStringValue(cJSON_GetObjectItem(d, "bdf")),
			cJSON_GetStringValue(cJSON_GetObjectItem(d, "id")),
			cJSON_GetObjectItem(d, "numa_node")->valueint, sw ? "  switch " : "", sw ? sw : "");
	}
	fprintf(out, "\nAdvanced settings (VM Options > Advanced > Configuration Parameters):\n");
	cJSON_ArrayForEach (s, cJSON_GetObjectItem(report, "settings"))
		fprintf(out, "  %s = %s\n      %s\n", cJSON_GetStringValue(cJSON_GetObjectItem(s, "key")),
			cJSON_GetStringValue(cJSON_GetObjectItem(s, "value")),
			cJSON_GetStringValue(cJSON_GetObjectItem(s, "why")));
	if (cJSON_GetArraySize(cJSON_GetObjectItem(report, "warnings")) > 0) {
		fprintf(out, "\nWarnings:\n");
		cJSON_ArrayForEach (w, cJSON_GetObjectItem(report, "warnings"))
			fprintf(out, "  - %s\n", w->valuestring);
	}
	if (cJSON_GetObjectItem(report, "nccl_topology"))
		fprintf(out, "\nThen %s.\n", cJSON_GetStringValue(cJSON_GetObjectItem(report, "nccl_topology")));
}
