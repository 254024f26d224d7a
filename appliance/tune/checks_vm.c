/* Checks for a guest: which hypervisor, steal time, devices passed through, NCCL's topology file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "hostfs.h"
#include "tune.h"

#define NCCL_TOPO_FILE "/etc/privai/nccl-topo.xml"

/* Steal's share of all CPU time since boot, in per mille; -1 unreadable. */
static int
steal_permille(const struct tune_host *h)
{
	char line[512];
	unsigned long long v[10] = { 0 }, total = 0;
	int n;

	if (hostfs_read_line(h->root, "/proc/stat", line, sizeof(line)) < 0 || strncmp(line, "cpu ", 4) != 0)
		return APP_ENOTFOUND;
	n = sscanf(line + 4, "%llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
		   &v[7]);
	if (n < 8)
		return APP_ENOTFOUND;
	for (int i = 0; i < 8; i++)
		total += v[i];
	return total == 0 ? APP_ENOTFOUND : (int)(v[7] * 1000 / total);
}

void
checks_vm(const struct tune_host *h, struct report *r)
{
	const int vmware = strncmp(h->hypervisor, "VMware", 6) == 0;
	struct check *c;
	int steal;

	if (h->ni.cpu_threads == 0) {
		c = report_add(r, "vm.hypervisor", "Hypervisor", CHECK_SKIP);
		report_found(c, "/proc/cpuinfo cannot be read: bare metal or a VM cannot be told");
		return;
	}
	if (!h->hypervisor[0]) {
		c = report_add(r, "vm.hypervisor", "Hypervisor", CHECK_PASS);
		report_found(c, "bare metal");
		return;
	}
	c = report_add(r, "vm.hypervisor", "Hypervisor", CHECK_PASS);
	report_found(c, "a VM on %s", h->hypervisor);
	report_expected(c, "bare metal, or a VM with its CPU and memory reserved");

	steal = steal_permille(h);
	c = report_add(r, "vm.steal", "CPU steal time", steal < 0 ? CHECK_SKIP : steal > 20 ? CHECK_WARN : CHECK_PASS);
	if (steal < 0) {
		report_found(c, "/proc/stat cannot be read");
		return;
	}
	report_found(c, "%d.%d%% of CPU time since boot stolen by the hypervisor", steal / 10, steal % 10);
	report_expected(c, "under 2%%: the VM's vCPUs run when it needs them");
	if (steal > 20)
		report_fix(c, "%s",
			   vmware ? "reserve all of the VM's CPU and memory and set Latency Sensitivity to High "
				    "(the symptom of an overcommitted host)"
				  : "pin the VM's vCPUs to dedicated host cores and reserve its memory");

	c = report_add(r, "vm.passthrough", "Devices passed through", h->topo.n_gpus > 0 ? CHECK_PASS : CHECK_SKIP);
	report_found(c, "%d GPU%s, %d RDMA NIC%s", h->topo.n_gpus, h->topo.n_gpus == 1 ? "" : "s", h->topo.n_nics,
		     h->topo.n_nics == 1 ? "" : "s");
	report_expected(c, "the GPUs (and for multi-node, one RDMA NIC per GPU) passed through");

	if (h->topo.n_gpus < 2 && h->topo.n_nics == 0)
		return;
	if (hostfs_exists(h->root, NCCL_TOPO_FILE)) {
		c = report_add(r, "vm.nccl_topology", "NCCL topology file", CHECK_PASS);
		report_found(c, "%s", NCCL_TOPO_FILE);
	} else {
		c = report_add(r, "vm.nccl_topology", "NCCL topology file", CHECK_WARN);
		report_found(c,
			     "none at %s: in a VM the PCIe topology is virtual, so NCCL cannot see which NIC is "
			     "next to which GPU",
			     NCCL_TOPO_FILE);
		report_fix(c,
			   "privai-fabric topology --write %s (from the host's pairing), and NCCL_TOPO_FILE "
			   "pointing at it",
			   NCCL_TOPO_FILE);
	}
	report_expected(c, "a topology file describing the host's real GPU-NIC pairing");
}
