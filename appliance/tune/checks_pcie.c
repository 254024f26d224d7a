/* PCIe checks: IOMMU, ACS and ATS, NIC links, GPU-to-NIC pairing, the 64-bit MMIO window. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "hostfs.h"
#include "nvidia.h"
#include "tune.h"

#define GIB (1ULL << 30)

static void
check_iommu(const struct tune_host *h, struct report *r)
{
	char cmdline[1024] = "", **units;
	struct check *c;
	int n, pt;

	units = hostfs_list(h->root, "/sys/class/iommu", 64, &n);
	hostfs_free_names(units, n);
	hostfs_read_line(h->root, "/proc/cmdline", cmdline, sizeof(cmdline));
	pt = strstr(cmdline, "iommu=pt") != NULL;
	if (h->hypervisor[0]) {
		c = report_add(r, "pcie.iommu", "IOMMU", CHECK_SKIP);
		report_found(c, "a VM: the hypervisor's IOMMU isolates the devices passed through");
		return;
	}
	if (h->topo.n_gpus == 0 && h->topo.n_nics == 0) {
		c = report_add(r, "pcie.iommu", "IOMMU", CHECK_SKIP);
		report_found(c, "no GPU or RDMA NIC to isolate (IOMMU %s)", n > 0 ? "on" : "off");
		return;
	}
	c = report_add(r, "pcie.iommu", "IOMMU", n > 0 ? CHECK_PASS : CHECK_WARN);
	if (n > 0)
		report_found(c, "on, %d unit%s%s", n, n == 1 ? "" : "s",
			     pt ? ", passthrough mode for the host (iommu=pt)" : "");
	else
		report_found(c, "off: no /sys/class/iommu units");
	report_expected(c, "on (intel_iommu=on or amd_iommu=on), iommu=pt for the host's own DMA");
	if (n == 0)
		report_fix(c, "enable VT-d/AMD-Vi in the firmware and boot with intel_iommu=on iommu=pt: device "
			      "isolation and passthrough need it");
}

/* The ACS control of the bridges between a device and its root port
 * (the root port's own routes between root ports, not within a switch). */
static int
acs_above(const struct pci_bus *bus, int i, int *dt)
{
	int ctrl = 0, has_dt = 1, any = 0;

	for (int p = bus->dev[i].parent; p >= 0 && bus->dev[p].parent >= 0; p = bus->dev[p].parent)
		if (bus->dev[p].acs_ctrl > 0) {
			ctrl |= bus->dev[p].acs_ctrl;
			has_dt &= (bus->dev[p].acs_ctrl & PCI_ACS_DT) != 0;
			any = 1;
		}
	*dt = any && has_dt;
	return ctrl;
}

static void
check_acs(const struct tune_host *h, struct report *r)
{
	const struct topo *t = &h->topo;
	int redirect = 0, total = 0, no_dt = 0;
	struct check *c;

	if (t->n_gpus == 0 || h->hypervisor[0]) {
		c = report_add(r, "pcie.acs", "ACS on the switch ports", CHECK_SKIP);
		report_found(c, "%s",
			     h->hypervisor[0] ? "a VM's bridges are virtual: ACS is set on the host"
					      : "no GPU: no peer-to-peer traffic to route");
		return;
	}
	for (int k = 0; k < t->bus.n; k++) {
		const struct pci_dev *b = &t->bus.dev[k];
		if (!topo_port_feeds_device(t, k))
			continue;
		total++;
		if (b->acs_ctrl > 0 && (b->acs_ctrl & (PCI_ACS_RR | PCI_ACS_CR))) {
			redirect++;
			no_dt += (b->acs_ctrl & PCI_ACS_DT) == 0;
		}
	}
	if (total == 0) {
		c = report_add(r, "pcie.acs", "ACS on the switch ports", CHECK_SKIP);
		report_found(c, "no GPU or NIC sits under a PCIe switch");
		return;
	}
	c = report_add(r, "pcie.acs", "ACS on the switch ports", no_dt ? CHECK_WARN : CHECK_PASS);
	report_found(c, "P2P redirect on %d of %d ports above GPUs and NICs%s", redirect, total,
		     redirect == 0 ? ""
		     : no_dt       ? ", Direct Translated P2P off on some"
				   : ", Direct Translated P2P on");
	report_expected(c, "redirect with Direct Translated P2P (isolation, and ATS-translated P2P stays in the "
			   "switch), or no redirect on a host without passthrough");
	if (no_dt)
		report_fix(c, "enable ACS Direct Translated P2P on the switch's downstream ports (firmware), or every "
			      "peer-to-peer transfer climbs to the root complex");
}

static void
check_nic_ats(const struct tune_host *h, int n, struct report *r)
{
	const struct topo *t = &h->topo;
	const struct pci_dev *d = &t->bus.dev[t->nic[n]];
	int dt, ctrl = acs_above(&t->bus, t->nic[n], &dt);
	char id[48];
	struct check *c;

	snprintf(id, sizeof(id), "nic.%d.ats", n);
	if (h->hypervisor[0]) {
		c = report_add(r, id, "NIC ATS", CHECK_SKIP);
		report_found(c, "%s %s: in a VM, ATS is set in the NIC's firmware and ACS on the host; check there",
			     topo_nic_name(t, n), d->bdf);
		return;
	}
	if (d->ats_ctrl < 0) {
		c = report_add(r, id, "NIC ATS", d->has_config ? CHECK_WARN : CHECK_SKIP);
		report_found(c, "%s %s: %s", topo_nic_name(t, n), d->bdf,
			     d->has_config ? "no ATS capability" : "config space not readable (run as root)");
		report_expected(c, "an ATS capability, enabled wherever ACS redirects peer-to-peer requests");
		if (d->has_config)
			report_fix(c, "lspci -vvv -s %s should list 'Address Translation Service'; update the NIC firmware",
				   d->bdf);
		return;
	}
	if (d->ats_ctrl == 0 && (ctrl & (PCI_ACS_RR | PCI_ACS_CR))) {
		c = report_add(r, id, "NIC ATS", CHECK_FAIL);
		report_found(c,
			     "%s %s: ATS off under ACS redirect: its peer-to-peer traffic with the GPUs detours "
			     "through the root complex (half the bandwidth or worse)",
			     topo_nic_name(t, n), d->bdf);
		report_fix(c, "mlxconfig -d %s set ATS_ENABLED=true, then power-cycle the host", d->bdf);
	} else {
		c = report_add(r, id, "NIC ATS", CHECK_PASS);
		report_found(c, "%s %s: ATS %s%s", topo_nic_name(t, n), d->bdf, d->ats_ctrl ? "on" : "off",
			     d->ats_ctrl ? "" : ", no ACS redirect above it");
	}
	report_expected(c, "ATS on wherever ACS redirects peer-to-peer requests");
}

/* The first port of the NIC's RDMA device, else its network interface. */
static void
check_nic_link(const struct tune_host *h, int n, struct report *r)
{
	const struct topo *t = &h->topo;
	const struct pci_dev *d = &t->bus.dev[t->nic[n]];
	char id[48], path[160], state[64] = "", rate[64] = "";
	struct check *c;
	long long speed = -1;
	int up;

	snprintf(id, sizeof(id), "nic.%d.link", n);
	if (d->n_rdma > 0) {
		snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/1/state", d->rdma[0]);
		hostfs_read_line(h->root, path, state, sizeof(state));
		snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/1/rate", d->rdma[0]);
		hostfs_read_line(h->root, path, rate, sizeof(rate));
		up = strstr(state, "ACTIVE") != NULL;
	} else if (d->n_netdev > 0) {
		snprintf(path, sizeof(path), "/sys/class/net/%s/operstate", d->netdev[0]);
		hostfs_read_line(h->root, path, state, sizeof(state));
		snprintf(path, sizeof(path), "/sys/class/net/%s/speed", d->netdev[0]);
		hostfs_read_long(h->root, path, 10, &speed);
		if (speed > 0)
			snprintf(rate, sizeof(rate), "%lld Mb/s", speed);
		up = strcmp(state, "up") == 0;
	} else {
		c = report_add(r, id, "NIC link", CHECK_WARN);
		report_found(c, "%s: no RDMA device or network interface on it (driver %s)", d->bdf,
			     d->driver[0] ? d->driver : "none");
		report_fix(c, "load mlx5_core and mlx5_ib (rdma-core)");
		return;
	}
	c = report_add(r, id, "NIC link", up ? CHECK_PASS : CHECK_FAIL);
	report_found(c, "%s %s: %s%s%s", topo_nic_name(t, n), d->bdf, state[0] ? state : "state unknown",
		     rate[0] ? ", " : "", rate);
	report_expected(c, "link up (ACTIVE)");
	if (!up)
		report_fix(c, "check the cable and the switch port; for InfiniBand, that a subnet manager runs on the "
			      "fabric");
}

static void
describe_pairs(const struct tune_host *h, char *out, size_t size)
{
	const struct topo *t = &h->topo;

	out[0] = '\0';
	for (int g = 0; g < t->n_gpus; g++) {
		size_t n = strlen(out);
		snprintf(out + n, size - n, "%sGPU%d-%s", g ? " " : "", g,
			 t->gpu_nic[g] >= 0 ? topo_nic_name(t, t->gpu_nic[g]) : "none");
	}
}

static void
check_pairing(const struct tune_host *h, struct report *r)
{
	const struct topo *t = &h->topo;
	int unpaired = -1, spare = -1, numa_only = 0, paired = 0;
	char pairs[300];
	struct check *c;

	if (t->n_gpus == 0 || t->n_nics == 0) {
		c = report_add(r, "pcie.pairing", "GPU-to-NIC pairing", CHECK_SKIP);
		report_found(c, "%s", t->n_gpus == 0 ? "no GPU" : "no RDMA NIC: a single-node GPU server");
		return;
	}
	for (int g = 0; g < t->n_gpus; g++) {
		paired += t->gpu_nic[g] >= 0;
		numa_only += t->gpu_pairing[g] == TOPO_PAIR_NUMA;
		if (t->gpu_nic[g] < 0 && unpaired < 0)
			unpaired = g;
	}
	for (int k = 0; k < t->n_nics && spare < 0; k++)
		if (t->nic_gpu[k] < 0)
			spare = k;
	describe_pairs(h, pairs, sizeof(pairs));
	if (unpaired >= 0 && spare >= 0 && t->gpu_switch[unpaired] >= 0) {
		const struct pci_dev *g = &t->bus.dev[t->gpu[unpaired]], *n = &t->bus.dev[t->nic[spare]];
		c = report_add(r, "pcie.pairing", "GPU-to-NIC pairing", CHECK_FAIL);
		report_found(c, "GPU%d %s has no NIC under its switch %s while %s %s sits unpaired under %s (%s)",
			     unpaired, g->bdf, t->bus.dev[t->gpu_switch[unpaired]].bdf, topo_nic_name(t, spare), n->bdf,
			     t->nic_switch[spare] >= 0 ? t->bus.dev[t->nic_switch[spare]].bdf : "a root port", pairs);
		report_fix(c,
			   "move the NIC %s into a slot under switch %s, beside GPU%d, so their traffic stays in the "
			   "switch",
			   n->bdf, t->bus.dev[t->gpu_switch[unpaired]].bdf, unpaired);
	} else if (unpaired >= 0) {
		c = report_add(r, "pcie.pairing", "GPU-to-NIC pairing", CHECK_WARN);
		report_found(c, "%d of %d GPUs have a NIC of their own (%s)", paired, t->n_gpus, pairs);
		report_fix(c, "add a NIC per GPU for multi-node tensor parallel; until then GPUs share NICs and "
			      "cross-node bandwidth is split between them");
	} else if (numa_only > 0 && !t->virtual_pcie) {
		c = report_add(r, "pcie.pairing", "GPU-to-NIC pairing", CHECK_WARN);
		report_found(c, "%d GPU%s share only a CPU socket with their NIC (%s)", numa_only,
			     numa_only == 1 ? "" : "s", pairs);
		report_fix(c, "GPUDirect RDMA through the root complex is slower than under a PCIe switch; "
			      "a board with GPUs and NICs on shared switches avoids it");
	} else {
		c = report_add(r, "pcie.pairing", "GPU-to-NIC pairing", CHECK_PASS);
		report_found(c, "%s%s", pairs,
			     t->virtual_pcie ? " (a VM's flat topology: paired by NUMA node and order; "
					       "NCCL needs a topology file, see vm.nccl_topology)"
					     : ", each under one switch");
	}
	report_expected(c, "every GPU with its own RDMA NIC under the same PCIe switch (1:1)");
}

/* The 64-bit windows the firmware or hypervisor gave the PCI buses:
 * top-level "PCI Bus" ranges of /proc/iomem that start above 4 GiB. */
static int
mmio64_bytes(const struct tune_host *h, uint64_t *total)
{
	char *text = hostfs_read_text(h->root, "/proc/iomem", 4 << 20, NULL), *line, *save = NULL;
	int windows = 0;

	*total = 0;
	if (text == NULL)
		return APP_ENOTFOUND;
	for (line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
		unsigned long long lo, hi;
		char *end, *p;
		if (line[0] == ' ' || strstr(line, ": PCI Bus ") == NULL)
			continue;
		errno = 0;
		lo = strtoull(line, &end, 16);
		if (end == line || *end != '-' || errno != 0)
			continue;
		p = end + 1;
		hi = strtoull(p, &end, 16);
		if (end == p || errno != 0 || hi < lo || lo < (4ULL << 30))
			continue;
		*total += hi - lo + 1;
		windows++;
	}
	free(text);
	return windows;
}

/* The 64-bit BARs of the GPUs and NICs, as sysfs gives them (in a VM even
 * those its window could not map), estimated where it does not. */
static uint64_t
bar64_bytes(const struct topo *t)
{
	uint64_t sum = 0;

	for (int g = 0; g < t->n_gpus; g++) {
		const struct pci_dev *d = &t->bus.dev[t->gpu[g]];
		sum += d->bars_known ? d->bar64_bytes : NVIDIA_GPU_BAR64_BYTES;
	}
	for (int n = 0; n < t->n_nics; n++) {
		const struct pci_dev *d = &t->bus.dev[t->nic[n]];
		sum += d->bars_known ? d->bar64_bytes : NVIDIA_SMALL_BAR64_BYTES;
	}
	return sum;
}

static void
check_mmio(const struct tune_host *h, struct report *r)
{
	uint64_t have, need = nvidia_mmio64_need_gib(h->topo.n_gpus) * GIB;
	struct check *c;
	int windows;

	if (h->topo.n_gpus == 0) {
		c = report_add(r, "pcie.mmio64", "64-bit MMIO window", CHECK_SKIP);
		report_found(c, "no GPU: no large BARs to map");
		return;
	}
	if ((windows = mmio64_bytes(h, &have)) < 0) {
		c = report_add(r, "pcie.mmio64", "64-bit MMIO window", CHECK_SKIP);
		report_found(c, "/proc/iomem cannot be read");
		return;
	}
	c = report_add(r, "pcie.mmio64", "64-bit MMIO window", have >= need ? CHECK_PASS : CHECK_FAIL);
	if (windows == 0)
		report_found(c, "no PCI bus window above 4 GiB in /proc/iomem");
	else
		report_found(c, "%llu GiB in %d window%s above 4 GiB", (unsigned long long)(have / GIB), windows,
			     windows == 1 ? "" : "s");
	report_expected(c, "at least %llu GiB: 128 GiB per GPU (%d) plus 32 GiB for NICs",
			(unsigned long long)(need / GIB), h->topo.n_gpus);
	if (have < need && h->hypervisor[0])
		report_fix(c,
			   "power the VM off and set pciPassthru.use64bitMMIO = TRUE and pciPassthru.64bitMMIOSizeGB = "
			   "%llu (the devices' 64-bit BARs, %.1f GiB, and room for alignment)",
			   (unsigned long long)nvidia_mmio64_window_gib(bar64_bytes(&h->topo)),
			   (double)bar64_bytes(&h->topo) / GIB);
	else if (have < need)
		report_fix(c, "enable Above 4G Decoding and size MMIO High to at least %llu GiB in the firmware",
			   (unsigned long long)(need / GIB));
}

/* Devices whose attributes could not be read are named, so a GPU with an
 * unreadable vendor id is not silently left out of every other check. */
static void
check_devices(const struct tune_host *h, struct report *r)
{
	const struct pci_bus *bus = &h->topo.bus;
	char list[300] = "";
	int bad = 0;
	struct check *c;

	if (bus->problem[0]) {
		c = report_add(r, "pcie.devices", "PCI devices", CHECK_FAIL);
		report_found(c, "%s", bus->problem);
		report_expected(c, "a readable /sys/bus/pci/devices");
		report_fix(c, "mount sysfs at %s/sys", strcmp(h->root, "/") == 0 ? "" : h->root);
		return;
	}
	for (int i = 0; i < bus->n; i++) {
		size_t n = strlen(list);
		if (bus->dev[i].problem[0] == '\0')
			continue;
		if (bad++ < 6)
			snprintf(list + n, sizeof(list) - n, "%s%s (%s)", n ? ", " : "", bus->dev[i].bdf,
				 bus->dev[i].problem);
	}
	c = report_add(r, "pcie.devices", "PCI devices", bad || bus->truncated ? CHECK_WARN : CHECK_PASS);
	if (bus->truncated)
		report_found(c, "more than %d devices; the first %d read", PCI_MAX_DEVICES, bus->n);
	else if (bad)
		report_found(c, "%d of %d devices with unreadable attributes: %s%s", bad, bus->n, list,
			     bad > 6 ? ", ..." : "");
	else
		report_found(c, "%d devices, every attribute read", bus->n);
	report_expected(c, "every device's ids, class, NUMA node and link readable");
	if (bad || bus->truncated)
		report_fix(c, "these devices are left out of the checks that need what could not be read; "
			      "compare with lspci -vvv");
}

void
checks_pcie(const struct tune_host *h, struct report *r)
{
	check_devices(h, r);
	check_iommu(h, r);
	check_acs(h, r);
	for (int n = 0; n < h->topo.n_nics; n++) {
		check_nic_link(h, n, r);
		check_nic_ats(h, n, r);
	}
	check_pairing(h, r);
	check_mmio(h, r);
}
