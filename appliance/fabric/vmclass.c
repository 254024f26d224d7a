/* The vSphere VM class report. */
#include <stdio.h>
#include <string.h>

#include "nvidia.h"
#include "vmclass.h"

/* What the VM's 64-bit MMIO window must hold: each device's 64-bit BARs
 * as sysfs gives them, or an estimate where it does not. */
struct bars {
	uint64_t bytes;
	int estimated;
};

static void
add_device(cJSON *list, const struct fabric *f, int dev, const char *role, const char *name, struct bars *b)
{
	const struct pci_dev *d = &f->topo.bus.dev[dev];
	cJSON *o = fabric_dev_json(f, dev);

	cJSON_AddNumberToObject(o, "order", cJSON_GetArraySize(list));
	cJSON_AddStringToObject(o, "role", role);
	cJSON_AddStringToObject(o, "name", name);
	if (d->bars_known)
		cJSON_AddNumberToObject(o, "bar64_bytes", (double)d->bar64_bytes);
	else
		cJSON_AddNullToObject(o, "bar64_bytes");
	cJSON_AddItemToArray(list, o);
	b->bytes += d->bars_known              ? d->bar64_bytes
		    : strcmp(role, "gpu") == 0 ? NVIDIA_GPU_BAR64_BYTES
					       : NVIDIA_SMALL_BAR64_BYTES;
	b->estimated += !d->bars_known;
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

static void
host_item(cJSON *list, const char *item, int ok, const char *found, const char *fix)
{
	cJSON *o = cJSON_CreateObject();

	cJSON_AddStringToObject(o, "item", item);
	cJSON_AddStringToObject(o, "state", ok ? "ok" : "fix");
	cJSON_AddStringToObject(o, "found", found);
	if (!ok)
		cJSON_AddStringToObject(o, "fix", fix);
	cJSON_AddItemToArray(list, o);
}

/* What the host needs beside the VM's settings, as its PCIe devices show
 * it (read on the host booted into Linux, or in this appliance on bare
 * metal): ACS on the switch ports above the devices, which the
 * hypervisor's passthrough checks for isolation, with Direct Translated
 * P2P so that ATS-translated peer-to-peer stays in the switch; and ATS on
 * the devices.  A VM's own bridges are virtual: nothing to say there. */
static void
host_settings(const struct fabric *f, cJSON *list)
{
	const struct topo *t = &f->topo;
	int ports = 0, no_acs = 0, no_dt = 0, nics = 0, no_ats = 0;
	char found[160];

	if (t->virtual_pcie)
		return;
	for (int k = 0; k < t->bus.n; k++) {
		const struct pci_dev *b = &t->bus.dev[k];
		if (!topo_port_feeds_device(t, k))
			continue;
		ports++;
		no_acs += b->acs_cap < 0;
		no_dt += b->acs_cap >= 0 && (b->acs_ctrl & PCI_ACS_DT) == 0;
	}
	for (int n = 0; n < t->n_nics; n++) {
		nics += t->nic_gpu[n] >= 0;
		no_ats += t->nic_gpu[n] >= 0 && t->bus.dev[t->nic[n]].ats_ctrl != 1;
	}
	if (ports > 0) {
		snprintf(found, sizeof(found), "%d of %d switch ports above the GPUs and NICs have no ACS capability",
			 no_acs, ports);
		host_item(list, "ACS on the switch ports (the hypervisor's passthrough isolation check)", no_acs == 0,
			  found,
			  "a switch port without ACS puts every device below it in one isolation group: the "
			  "hypervisor passes them through together or not at all; update the switch firmware");
		snprintf(found, sizeof(found), "Direct Translated P2P off on %d of %d switch ports", no_dt,
			 ports - no_acs);
		host_item(list, "ACS Direct Translated P2P", no_dt == 0, found,
			  "enable it on the switch's downstream ports (BIOS or switch firmware): with P2P redirect "
			  "on and it off, every GPU-NIC and GPU-GPU transfer climbs to the root complex");
	}
	if (nics > 0) {
		snprintf(found, sizeof(found), "ATS off or missing on %d of %d paired NICs", no_ats, nics);
		host_item(list, "ATS on the NICs", no_ats == 0, found,
			  "mlxconfig -d BDF set ATS_ENABLED=true and power-cycle: without ATS, RelaxACSforP2P "
			  "cannot keep the NIC's peer-to-peer in the switch");
	}
}

cJSON *
vmclass_json(const struct fabric *f, int shared_nvswitch)
{
	const struct topo *t = &f->topo;
	cJSON *o = cJSON_CreateObject(), *devices, *settings, *warnings;
	int nic_listed[TOPO_MAX_NICS] = { 0 };
	struct bars bars = { 0, 0 };
	char name[64], size[24], why[320];

	cJSON_AddStringToObject(o, "mode",
				t->n_nvswitches == 0 ? "no NVSwitch"
				: shared_nvswitch ? "shared NVSwitch (the switches stay with the host's Fabric Manager)"
						  : "full passthrough (the VM owns the board and runs Fabric Manager)");
	devices = cJSON_AddArrayToObject(o, "devices");
	settings = cJSON_AddArrayToObject(o, "settings");
	warnings = cJSON_AddArrayToObject(o, "warnings");
	host_settings(f, cJSON_AddArrayToObject(o, "host"));
	for (int g = 0; g < t->n_gpus; g++) {
		const struct nvidia_gpu_model *m = nvidia_gpu_model(t->bus.dev[t->gpu[g]].device);
		int n = t->gpu_nic[g];
		snprintf(name, sizeof(name), "GPU%d %s", g, m ? m->name : "NVIDIA GPU");
		add_device(devices, f, t->gpu[g], "gpu", name, &bars);
		if (n >= 0) {
			snprintf(name, sizeof(name), "NIC%d %s", g, topo_nic_name(t, n));
			add_device(devices, f, t->nic[n], "nic", name, &bars);
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
			add_device(devices, f, t->nic[n], "nic", name, &bars);
		}
	if (!shared_nvswitch)
		for (int s = 0; s < t->n_nvswitches; s++) {
			snprintf(name, sizeof(name), "NVSwitch%d", s);
			add_device(devices, f, t->nvswitch[s], "nvswitch", name, &bars);
		}
	if (t->n_gpus > 0) {
		uint64_t window = nvidia_mmio64_window_gib(bars.bytes);
		snprintf(size, sizeof(size), "%llu", (unsigned long long)window);
		snprintf(why, sizeof(why),
			 "the 64-bit BARs of the %d devices add up to %.1f GiB%s; plus %.1f GiB for alignment gaps, "
			 "in 8 GiB steps, not rounded up to a power of two (a needlessly large window is itself "
			 "refused by some hosts' firmware)",
			 cJSON_GetArraySize(devices), (double)bars.bytes / (1ULL << 30),
			 bars.estimated ? " (estimated where sysfs gave no resource file: 128 GiB a GPU)" : "",
			 (double)window - (double)bars.bytes / (1ULL << 30));
		setting(settings, "pciPassthru.use64bitMMIO", "TRUE", "the GPUs' BARs map above 4 GiB");
		setting(settings, "pciPassthru.64bitMMIOSizeGB", size, why);
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
	if (cJSON_GetArraySize(cJSON_GetObjectItem(report, "host")) > 0) {
		fprintf(out, "\nOn the host:\n");
		cJSON_ArrayForEach (s, cJSON_GetObjectItem(report, "host")) {
			const char *fix = cJSON_GetStringValue(cJSON_GetObjectItem(s, "fix"));
			fprintf(out, "  [%s] %s: %s\n", cJSON_GetStringValue(cJSON_GetObjectItem(s, "state")),
				cJSON_GetStringValue(cJSON_GetObjectItem(s, "item")),
				cJSON_GetStringValue(cJSON_GetObjectItem(s, "found")));
			if (fix != NULL)
				fprintf(out, "      fix: %s\n", fix);
		}
	}
	if (cJSON_GetArraySize(cJSON_GetObjectItem(report, "warnings")) > 0) {
		fprintf(out, "\nWarnings:\n");
		cJSON_ArrayForEach (w, cJSON_GetObjectItem(report, "warnings"))
			fprintf(out, "  - %s\n", w->valuestring);
	}
	if (cJSON_GetObjectItem(report, "nccl_topology"))
		fprintf(out, "\nThen %s.\n", cJSON_GetStringValue(cJSON_GetObjectItem(report, "nccl_topology")));
}
