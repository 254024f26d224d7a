/* The devices of a workload VM, and the checks a passthrough needs (vm.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostfs.h"
#include "nvidia.h"
#include "pci.h"
#include "topo.h"
#include "vm/vm.h"

static int refuse(struct vm_refusal *why, int status, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int
refuse(struct vm_refusal *why, int status, const char *code, const char *fmt, ...)
{
	va_list ap;

	why->status = status;
	snprintf(why->code, sizeof(why->code), "%s", code);
	va_start(ap, fmt);
	vsnprintf(why->message, sizeof(why->message), fmt, ap);
	va_end(ap);
	return -1;
}

static int
in_vm(const struct vm_spec *s, const char *bdf)
{
	for (int i = 0; i < s->n_devices; i++)
		if (strcmp(s->dev[i].bdf, bdf) == 0)
			return 1;
	return 0;
}

/* Bound to vfio-pci, not held by another VM. */
static int
usable(const struct pci_dev *d, const char *what, const char (*held)[16], const char (*held_by)[64], int n_held,
       struct vm_refusal *why)
{
	for (int i = 0; i < n_held; i++)
		if (strcmp(held[i], d->bdf) == 0)
			return refuse(why, 409, "device_busy", "%s %s is passed through to VM '%s' already", what,
				      d->bdf, held_by[i]);
	if (strcmp(d->driver, "vfio-pci") != 0)
		return refuse(why, 422, "not_vfio",
			      "%s %s is bound to %s, not vfio-pci: bind it for passthrough (driverctl "
			      "set-override %s vfio-pci) and ask again",
			      what, d->bdf, d->driver[0] ? d->driver : "no driver", d->bdf);
	return 0;
}

/* Every device of d's IOMMU group goes with the VM or is a bridge: a VM
 * cannot own part of a group. */
static int
own_group(const char *root, const struct pci_bus *bus, const struct vm_spec *s, const struct pci_dev *d,
	  struct vm_refusal *why)
{
	char dir[96];
	int n = 0;

	snprintf(dir, sizeof(dir), "/sys/bus/pci/devices/%s/iommu_group/devices", d->bdf);
	char **names = hostfs_list(root, dir, 256, &n);
	if (names == NULL || n == 0) {
		hostfs_free_names(names, n);
		return refuse(why, 422, "no_iommu",
			      "%s has no IOMMU group: turn the IOMMU on (intel_iommu=on or amd_iommu=on on the kernel "
			      "command line, VT-d/AMD-Vi in the firmware)",
			      d->bdf);
	}
	int rc = 0;
	for (int i = 0; i < n && rc == 0; i++) {
		int k = pci_find(bus, names[i]);
		if (in_vm(s, names[i]) || (k >= 0 && pci_is_bridge(&bus->dev[k])))
			continue;
		rc = refuse(why, 422, "iommu_group",
			    "%s shares its IOMMU group with %s, which the VM would not own: a group passes through "
			    "whole (ACS on the switch port above them would split it)",
			    d->bdf, names[i]);
	}
	hostfs_free_names(names, n);
	return rc;
}

static void
add(struct vm_spec *s, const struct topo *t, int dev, const char *role, const char *name)
{
	const struct pci_dev *d = &t->bus.dev[dev];
	struct vm_device *v = &s->dev[s->n_devices++];

	snprintf(v->bdf, sizeof(v->bdf), "%s", d->bdf);
	snprintf(v->role, sizeof(v->role), "%s", role);
	snprintf(v->name, sizeof(v->name), "%s", name);
	v->numa_node = d->numa_node;
	v->bar64 = d->bars_known              ? d->bar64_bytes
		   : strcmp(role, "gpu") == 0 ? NVIDIA_GPU_BAR64_BYTES
					      : NVIDIA_SMALL_BAR64_BYTES;
}

/* The first n CPUs of a kernel cpulist ("0-3,8") as one ("0,1,2,3");
 * how many it has. */
static int
first_cpus(const char *list, int n, char *out, size_t size)
{
	const char *s = list;
	int have = 0;
	size_t len = 0;

	out[0] = '\0';
	while (*s != '\0') {
		char *end;
		long lo = strtol(s, &end, 10), hi = lo;
		if (end == s)
			break;
		if (*end == '-')
			hi = strtol(end + 1, &end, 10);
		for (long c = lo; c <= hi && c - lo < 4096; c++, have++)
			if (have < n && len + 8 < size)
				len += (size_t)snprintf(out + len, size - len, "%s%ld", have ? "," : "", c);
		s = *end == ',' ? end + 1 : end;
		if (*end != ',')
			break;
	}
	return have;
}

int
vm_devices_pick(const char *sys_root, const char *const *gpus, int n_gpus, const char (*held)[16],
		const char (*held_by)[64], int n_held, struct vm_spec *s, struct vm_refusal *why)
{
	struct topo t;
	char err[160];
	int rc = 0;

	s->n_devices = 0;
	s->numa_node = -1;
	s->cpuset[0] = '\0';
	if (topo_read(sys_root, &t, err, sizeof(err)) < 0)
		return refuse(why, 500, "internal", "reading the PCI topology: %s", err);
	for (int i = 0; i < n_gpus && rc == 0; i++) {
		int k = pci_find(&t.bus, gpus[i]), g = -1;
		for (int j = 0; k >= 0 && j < t.n_gpus; j++)
			g = t.gpu[j] == k ? j : g;
		if (g < 0) {
			rc = refuse(why, 422, "invalid_field",
				    "%.16s is not a GPU of this host (GET /api/v1/gpus lists them)", gpus[i]);
			break;
		}
		if (in_vm(s, t.bus.dev[k].bdf)) {
			rc = refuse(why, 422, "invalid_field", "GPU %s is named twice", t.bus.dev[k].bdf);
			break;
		}
		const struct nvidia_gpu_model *m = nvidia_gpu_model(t.bus.dev[k].device);
		if ((rc = usable(&t.bus.dev[k], "GPU", held, held_by, n_held, why)) < 0)
			break;
		add(s, &t, k, "gpu", m ? m->name : "NVIDIA GPU");
		int nic = t.gpu_nic[g];
		if (nic < 0 || t.gpu_pairing[g] != TOPO_PAIR_SWITCH) {
			if (t.n_nics > 0)
				rc = refuse(why, 422, "unpaired",
					    "GPU %s has no RDMA NIC under its PCIe switch: a workload VM takes GPU + "
					    "NIC "
					    "pairs (privai-fabric discover shows the pairing)",
					    t.bus.dev[k].bdf);
			continue; /* a host without RDMA NICs passes GPUs alone */
		}
		const struct pci_dev *nd = &t.bus.dev[t.nic[nic]];
		if ((rc = usable(nd, "NIC", held, held_by, n_held, why)) < 0) {
			if (why->status == 409)
				snprintf(why->message + strlen(why->message),
					 sizeof(why->message) - strlen(why->message),
					 "; it is the partner of GPU %s, which goes only with it", t.bus.dev[k].bdf);
			break;
		}
		add(s, &t, t.nic[nic], "nic", topo_nic_name(&t, nic));
	}
	for (int i = 0; i < s->n_devices && rc == 0; i++)
		rc = own_group(sys_root, &t.bus, s, &t.bus.dev[pci_find(&t.bus, s->dev[i].bdf)], why);
	if (rc == 0) {
		uint64_t bars = 0;
		int node = s->n_devices > 0 ? s->dev[0].numa_node : -1;
		for (int i = 0; i < s->n_devices; i++) {
			bars += s->dev[i].bar64;
			node = s->dev[i].numa_node == node ? node : -1;
		}
		s->mmio_window_gib = bars > 0 ? (int)nvidia_mmio64_window_gib(bars) : 0;
		s->numa_node = node;
		if (node >= 0) {
			char path[96], list[1024];
			snprintf(path, sizeof(path), "/sys/devices/system/node/node%d/cpulist", node);
			if (hostfs_read_line(sys_root, path, list, sizeof(list)) == 0) {
				int have = first_cpus(list, s->vcpus, s->cpuset, sizeof(s->cpuset));
				if (have < s->vcpus)
					rc = refuse(why, 422, "invalid_field",
						    "NUMA node %d, where the GPUs are, has %d CPUs, fewer than the %d "
						    "vCPUs "
						    "asked for",
						    node, have, s->vcpus);
			}
		}
	}
	topo_free(&t);
	return rc;
}
