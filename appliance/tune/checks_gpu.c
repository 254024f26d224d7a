/* GPU checks: count, driver, PCIe links, reset method, persistence, peer memory, Fabric Manager. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostfs.h"
#include "nvidia.h"
#include "tune.h"

static const char *
gpu_name(unsigned device, int *sxm)
{
	const struct nvidia_gpu_model *m = nvidia_gpu_model(device);

	if (sxm != NULL)
		*sxm = m != NULL && m->sxm;
	return m != NULL ? m->name : "NVIDIA GPU";
}

static const struct pci_dev *
gpu(const struct tune_host *h, int g)
{
	return &h->topo.bus.dev[h->topo.gpu[g]];
}

static void
check_count(const struct tune_host *h, struct report *r)
{
	const struct topo *t = &h->topo;
	struct check *c;

	if (t->gpus_seen > TOPO_MAX_GPUS) {
		c = report_add(r, "gpu.count", "GPUs", CHECK_FAIL);
		report_found(c, "%d NVIDIA GPUs on the PCI bus; only the first %d are checked", t->gpus_seen,
			     TOPO_MAX_GPUS);
		report_expected(c, "at most %d GPUs in one node (the largest NVSwitch systems carry 16)",
				TOPO_MAX_GPUS);
		report_fix(c, "check the inventory against the server's specification: a recorded or virtual "
			      "topology may list devices twice");
	} else if (t->n_gpus == 0 && t->n_nvswitches > 0) {
		c = report_add(r, "gpu.count", "GPUs", CHECK_FAIL);
		report_found(c, "no GPU on the PCI bus, but %d NVSwitch%s", t->n_nvswitches,
			     t->n_nvswitches == 1 ? "" : "es");
		report_expected(c, "the board's GPUs (an HGX board carries 8 with 4 NVSwitches)");
		report_fix(c, "the GPUs fell off the bus or are held by another host: check the BMC's event log, "
			      "reseat the baseboard, cold-boot");
	} else if (t->n_gpus == 0) {
		c = report_add(r, "gpu.count", "GPUs", CHECK_SKIP);
		report_found(c, "no NVIDIA GPU on the PCI bus: a CPU-inference node");
		return;
	} else {
		const struct pci_dev *d = gpu(h, 0);
		int same = 1;
		for (int g = 1; g < t->n_gpus; g++)
			same &= gpu(h, g)->device == d->device;
		c = report_add(r, "gpu.count", "GPUs", same ? CHECK_PASS : CHECK_WARN);
		if (same)
			report_found(c, "%d x %s (10de:%04x)", t->n_gpus, gpu_name(d->device, NULL), d->device);
		else
			report_found(c, "%d GPUs of different models", t->n_gpus);
		report_expected(c, "GPUs of one model (tensor parallel runs at the slowest GPU's pace)");
		if (!same)
			report_fix(c, "place a deployment's GPUs on one model");
	}
}

static void
check_driver(const struct tune_host *h, struct report *r)
{
	const struct topo *t = &h->topo;
	struct check *c;
	int bound = 0;

	if (t->n_gpus == 0)
		return;
	for (int g = 0; g < t->n_gpus; g++)
		bound += strcmp(gpu(h, g)->driver, "nvidia") == 0;
	if (h->driver_version[0] == '\0' || bound < t->n_gpus) {
		c = report_add(r, "gpu.driver", "NVIDIA driver", CHECK_FAIL);
		report_found(c, "%s; bound to %d of %d GPUs",
			     h->driver_version[0] ? h->driver_version : "the nvidia module is not loaded", bound,
			     t->n_gpus);
		report_fix(c, "install the NVIDIA data-center driver and load it (modprobe nvidia); a GPU bound to "
			      "vfio-pci or another driver is not usable here");
	} else {
		c = report_add(r, "gpu.driver", "NVIDIA driver", CHECK_PASS);
		report_found(c, "%s, bound to all %d GPUs", h->driver_version, t->n_gpus);
	}
	report_expected(c, "the nvidia module loaded and bound to every GPU");
}

static void
check_link(const struct tune_host *h, int g, struct report *r)
{
	const struct pci_dev *d = gpu(h, g);
	char id[48];
	struct check *c;

	snprintf(id, sizeof(id), "gpu.%d.link", g);
	if (d->cur_width == 0 || d->max_width == 0 || d->cur_speed_gts == 0 || d->max_speed_gts == 0) {
		c = report_add(r, id, "GPU PCIe link", CHECK_WARN);
		report_found(c, "%s: the link is not reported%s%s", d->bdf, d->problem[0] ? " (unreadable: " : "",
			     d->problem[0] ? d->problem : "");
		if (d->problem[0])
			strncat(c->found, ")", sizeof(c->found) - strlen(c->found) - 1);
		report_expected(c, "current_link_speed/width equal to max_link_speed/width");
		report_fix(c, "read it with lspci -vv -s %s (LnkSta against LnkCap)", d->bdf);
		return;
	}
	if (d->cur_width < d->max_width) {
		c = report_add(r, id, "GPU PCIe link", CHECK_FAIL);
		report_fix(c,
			   "the link trained at x%d: reseat the GPU or its riser, check the slot and the "
			   "switch port, and update the board firmware",
			   d->cur_width);
	} else if (d->cur_speed_gts < d->max_speed_gts) {
		c = report_add(r, id, "GPU PCIe link", CHECK_WARN);
		report_fix(c, "an idle GPU lowers its link speed to save power; read it again under load, and if it "
			      "stays low check the slot's generation setting in the firmware");
	} else {
		c = report_add(r, id, "GPU PCIe link", CHECK_PASS);
	}
	report_found(c, "%s: %.1f GT/s x%d of %.1f GT/s x%d", d->bdf, d->cur_speed_gts, d->cur_width, d->max_speed_gts,
		     d->max_width);
	report_expected(c, "%.1f GT/s x%d", d->max_speed_gts, d->max_width);
}

static void
check_reset(const struct tune_host *h, int g, struct report *r)
{
	const struct pci_dev *d = gpu(h, g);
	char id[48], methods[80];
	struct check *c;

	snprintf(id, sizeof(id), "gpu.%d.reset", g);
	snprintf(methods, sizeof(methods), " %s ", d->reset_method);
	if (d->reset_method[0] == '\0') {
		c = report_add(r, id, "GPU reset method", CHECK_WARN);
		report_found(c, "%s: the kernel does not list reset methods", d->bdf);
		report_fix(c, "a kernel >= 5.15 lists them in reset_method; lspci -vv -s %s shows FLReset+ in DevCap",
			   d->bdf);
	} else if (strstr(methods, " flr ") != NULL) {
		c = report_add(r, id, "GPU reset method", CHECK_PASS);
		report_found(c, "%s: %s", d->bdf, d->reset_method);
	} else {
		c = report_add(r, id, "GPU reset method", CHECK_FAIL);
		report_found(c, "%s: %s (no function-level reset)", d->bdf, d->reset_method);
		report_fix(c,
			   "without FLR a GPU cannot be reset alone (passthrough, recovery after an Xid): update the "
			   "GPU's VBIOS and the board firmware");
	}
	report_expected(c, "flr among the reset methods");
}

static void
check_persistence(const struct tune_host *h, struct report *r)
{
	char target[256];
	struct check *c;

	if (h->topo.n_gpus == 0)
		return;
	if (tune_process_running(h, "nvidia-persiste")) {
		c = report_add(r, "gpu.persistence", "GPU persistence", CHECK_PASS);
		report_found(c, "nvidia-persistenced is running");
	} else if (hostfs_link_target(h->root,
				      "/etc/systemd/system/multi-user.target.wants/nvidia-persistenced.service", target,
				      sizeof(target)) == 0) {
		c = report_add(r, "gpu.persistence", "GPU persistence", CHECK_WARN);
		report_found(c, "nvidia-persistenced is enabled but not running");
		report_fix(c,
			   "systemctl start nvidia-persistenced; if it stops again, journalctl -u nvidia-persistenced");
	} else {
		c = report_add(r, "gpu.persistence", "GPU persistence", CHECK_WARN);
		report_found(c, "nvidia-persistenced is not running: the driver tears the GPUs down when the last "
				"client exits and each engine start pays for bringing them up");
		report_fix(c, "privai-tune apply --profile gpu-inference (enables nvidia-persistenced.service)");
	}
	report_expected(c, "nvidia-persistenced running");
}

static void
check_peermem(const struct tune_host *h, struct report *r)
{
	struct check *c;

	if (h->topo.n_gpus == 0)
		return;
	if (h->topo.n_nics == 0) {
		c = report_add(r, "gpu.peermem", "GPUDirect RDMA module", CHECK_SKIP);
		report_found(c, "no RDMA NIC: GPUDirect RDMA does not apply");
		return;
	}
	if (hostfs_exists(h->root, "/sys/module/nvidia_peermem")) {
		c = report_add(r, "gpu.peermem", "GPUDirect RDMA module", CHECK_PASS);
		report_found(c, "nvidia_peermem loaded");
	} else {
		c = report_add(r, "gpu.peermem", "GPUDirect RDMA module", CHECK_FAIL);
		report_found(c, "nvidia_peermem is not loaded: NCCL's RDMA traffic is staged through host memory");
		report_fix(c, "privai-tune apply --profile gpu-inference (loads it now and at boot through "
			      "/etc/modules-load.d)");
	}
	report_expected(c, "nvidia_peermem loaded");
}

static void
check_fabricmanager(const struct tune_host *h, struct report *r)
{
	const struct topo *t = &h->topo;
	char version[64];
	struct check *c;
	int sxm = 0, running;

	if (t->n_gpus > 0)
		gpu_name(gpu(h, 0)->device, &sxm);
	if (t->n_nvswitches == 0) {
		c = report_add(r, "fabric.manager", "Fabric Manager", CHECK_SKIP);
		if (h->hypervisor[0] && sxm)
			report_found(c, "no NVSwitch visible in this VM: with NVSwitch GPUs passed through, Fabric "
					"Manager runs in the service VM or on the host (shared NVSwitch mode)");
		else
			report_found(c, "no NVSwitch: Fabric Manager is not needed");
		return;
	}
	running = tune_process_running(h, "nv-fabricmanage");
	if (nvidia_fm_package_version(h->root, version, sizeof(version)) < 0) {
		c = report_add(r, "fabric.manager", "Fabric Manager", CHECK_FAIL);
		report_found(c, "%d NVSwitches but no nvidia-fabricmanager package installed%s", t->n_nvswitches,
			     running ? " (a process runs: installed outside the package manager?)" : "");
		report_fix(c,
			   "install nvidia-fabricmanager-%.*s of the driver's version (%s) and start it; CUDA reports "
			   "'system not ready' until it has trained the fabric",
			   (int)strcspn(h->driver_version, "."), h->driver_version,
			   h->driver_version[0] ? h->driver_version : "unknown");
	} else if (h->driver_version[0] && strcmp(version, h->driver_version) != 0) {
		c = report_add(r, "fabric.manager", "Fabric Manager", CHECK_FAIL);
		report_found(c, "Fabric Manager %s with driver %s%s", version, h->driver_version,
			     running ? "" : ", not running");
		report_fix(c,
			   "install nvidia-fabricmanager of exactly %s (it refuses a driver of another version), then "
			   "restart nvidia-fabricmanager.service",
			   h->driver_version);
	} else if (!running) {
		c = report_add(r, "fabric.manager", "Fabric Manager", CHECK_FAIL);
		report_found(c, "Fabric Manager %s installed but not running", version);
		report_fix(c, "systemctl enable --now nvidia-fabricmanager.service; its log is "
			      "/var/log/fabricmanager.log");
	} else {
		c = report_add(r, "fabric.manager", "Fabric Manager", CHECK_PASS);
		report_found(c, "Fabric Manager %s running, driver %s, %d NVSwitches", version, h->driver_version,
			     t->n_nvswitches);
	}
	report_expected(c, "nv-fabricmanager running, of the driver's version");
}

void
checks_gpu(const struct tune_host *h, struct report *r)
{
	check_count(h, r);
	check_driver(h, r);
	for (int g = 0; g < h->topo.n_gpus; g++) {
		check_link(h, g, r);
		check_reset(h, g, r);
	}
	check_persistence(h, r);
	check_peermem(h, r);
	check_fabricmanager(h, r);
}
