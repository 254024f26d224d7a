/* Reading the node: topology, RDMA devices, CPUs, NVIDIA versions. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "status.h"
#include "fabric.h"
#include "hostfs.h"
#include "nvidia.h"

int
fabric_read(const char *root, int use_verbs, struct fabric *f, char *err, size_t errsize)
{
	memset(f, 0, sizeof(*f));
	f->root = root;
	if (topo_read(root, &f->topo, err, errsize) < 0)
		return APP_EIO;
	node_info_read(root, &f->ni);
	cpu_id_read(root, &f->cpu);
	nvidia_driver_version(root, f->driver_version, sizeof(f->driver_version));
	nvidia_fm_package_version(root, f->fm_version, sizeof(f->fm_version));
	f->peermem = hostfs_exists(root, "/sys/module/nvidia_peermem");
	for (int n = 0; n < f->topo.n_nics; n++) {
		const struct pci_dev *d = &f->topo.bus.dev[f->topo.nic[n]];
		if (d->n_rdma > 0)
			rdma_read_sysfs(root, d->rdma[0], &f->nic_rdma[n]);
	}
	snprintf(f->rdma_source, sizeof(f->rdma_source), "sysfs");
	if (use_verbs) {
		if (rdma_verbs_fill(f, f->rdma_problem, sizeof(f->rdma_problem)) == 0)
			snprintf(f->rdma_source, sizeof(f->rdma_source), "libibverbs");
	} else {
		snprintf(f->rdma_problem, sizeof(f->rdma_problem), "not the live host (--root): read from sysfs");
	}
	return 0;
}

void
fabric_free(struct fabric *f)
{
	topo_free(&f->topo);
}

int
fabric_numa_of(const struct fabric *f, int dev)
{
	int numa = f->topo.bus.dev[dev].numa_node;

	if (numa >= 0)
		return numa;
	return f->ni.numa_nodes > 0 ? f->ni.numa[0].id : 0;
}

int
fabric_json_addf(cJSON *array, const char *fmt, ...)
{
	char msg[320];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	cJSON_AddItemToArray(array, cJSON_CreateString(msg));
	return 1;
}

cJSON *
fabric_dev_json(const struct fabric *f, int i)
{
	const struct pci_dev *d = &f->topo.bus.dev[i];
	int sw = topo_switch_of(&f->topo.bus, i);
	cJSON *o = cJSON_CreateObject();
	char id[16];

	cJSON_AddStringToObject(o, "bdf", d->bdf);
	snprintf(id, sizeof(id), "%04x:%04x", d->vendor, d->device);
	cJSON_AddStringToObject(o, "id", id);
	cJSON_AddNumberToObject(o, "numa_node", d->numa_node);
	if (sw >= 0)
		cJSON_AddStringToObject(o, "switch", f->topo.bus.dev[sw].bdf);
	else
		cJSON_AddNullToObject(o, "switch");
	if (d->problem[0])
		cJSON_AddStringToObject(o, "problem", d->problem);
	return o;
}

static cJSON *
rdma_json(const struct rdma_dev *r)
{
	cJSON *o = cJSON_CreateObject(), *ports = cJSON_AddArrayToObject(o, "ports");
	char guid[24];

	cJSON_AddStringToObject(o, "name", r->name);
	snprintf(guid, sizeof(guid), "0x%016" PRIx64, r->node_guid);
	cJSON_AddStringToObject(o, "node_guid", guid);
	snprintf(guid, sizeof(guid), "0x%016" PRIx64, r->sys_image_guid);
	cJSON_AddStringToObject(o, "sys_image_guid", guid);
	cJSON_AddStringToObject(o, "fw_ver", r->fw_ver);
	for (int p = 0; p < r->n_ports; p++) {
		const struct rdma_port *rp = &r->port[p];
		cJSON *j = cJSON_CreateObject();
		cJSON_AddNumberToObject(j, "port", rp->num);
		cJSON_AddStringToObject(j, "state", rp->state_name[0] ? rp->state_name : "unknown");
		cJSON_AddStringToObject(j, "phys_state", rp->phys_state);
		cJSON_AddNumberToObject(j, "rate_mbps", (double)rp->rate_mbps);
		cJSON_AddStringToObject(j, "link_layer", rp->link_layer);
		cJSON_AddItemToArray(ports, j);
	}
	if (r->problem[0])
		cJSON_AddStringToObject(o, "problem", r->problem);
	return o;
}

static const char *
pairing_name(int kind)
{
	return kind == TOPO_PAIR_SWITCH ? "switch" : kind == TOPO_PAIR_NUMA ? "numa" : "none";
}

cJSON *
fabric_json(const struct fabric *f)
{
	const struct topo *t = &f->topo;
	cJSON *o = cJSON_CreateObject(), *a;

	cJSON_AddStringToObject(o, "driver_version", f->driver_version);
	cJSON_AddStringToObject(o, "fabricmanager_version", f->fm_version);
	cJSON_AddBoolToObject(o, "guest", f->cpu.guest);
	cJSON_AddBoolToObject(o, "virtual_pcie", t->virtual_pcie);
	cJSON_AddBoolToObject(o, "peermem", f->peermem);
	cJSON_AddNumberToObject(o, "gpus_seen", t->gpus_seen);
	a = cJSON_AddArrayToObject(o, "gpus");
	for (int g = 0; g < t->n_gpus; g++) {
		cJSON *j = fabric_dev_json(f, t->gpu[g]);
		const struct nvidia_gpu_model *m = nvidia_gpu_model(t->bus.dev[t->gpu[g]].device);
		cJSON_AddNumberToObject(j, "index", g);
		cJSON_AddStringToObject(j, "model", m ? m->name : "unknown");
		if (t->gpu_nic[g] >= 0)
			cJSON_AddStringToObject(j, "nic", topo_nic_name(t, t->gpu_nic[g]));
		else
			cJSON_AddNullToObject(j, "nic");
		cJSON_AddStringToObject(j, "pairing", pairing_name(t->gpu_pairing[g]));
		cJSON_AddItemToArray(a, j);
	}
	a = cJSON_AddArrayToObject(o, "nvswitches");
	for (int s = 0; s < t->n_nvswitches; s++)
		cJSON_AddItemToArray(a, fabric_dev_json(f, t->nvswitch[s]));
	a = cJSON_AddArrayToObject(o, "nics");
	for (int n = 0; n < t->n_nics; n++) {
		cJSON *j = fabric_dev_json(f, t->nic[n]);
		cJSON_AddStringToObject(j, "name", topo_nic_name(t, n));
		if (f->nic_rdma[n].name[0])
			cJSON_AddItemToObject(j, "rdma", rdma_json(&f->nic_rdma[n]));
		cJSON_AddNumberToObject(j, "gpu", t->nic_gpu[n]);
		cJSON_AddItemToArray(a, j);
	}
	cJSON_AddStringToObject(o, "rdma_source", f->rdma_source);
	if (f->rdma_problem[0])
		cJSON_AddStringToObject(o, "rdma_note", f->rdma_problem);
	return o;
}
