/* Reading the host once for every check. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strfmt.h"
#include "status.h"
#include "cpuid.h"
#include "hostfs.h"
#include "nvidia.h"
#include "tune.h"

static void
read_kernel(struct tune_host *h)
{
	int maj, min;

	h->kernel_major = h->kernel_minor = -1;
	if (sscanf(h->ni.kernel, "%d.%d", &maj, &min) == 2 && maj > 0 && maj < 100 && min >= 0 && min < 1000) {
		h->kernel_major = maj;
		h->kernel_minor = min;
	}
}

/* DMI names a guest's hypervisor. */
static void
read_hypervisor(struct tune_host *h, int guest)
{
	char vendor[64] = "", product[64] = "";

	if (!guest)
		return;
	hostfs_read_line(h->root, "/sys/class/dmi/id/sys_vendor", vendor, sizeof(vendor));
	hostfs_read_line(h->root, "/sys/class/dmi/id/product_name", product, sizeof(product));
	/* a name for people, cut to its field if need be */
	msg_fmt(h->hypervisor, sizeof(h->hypervisor), "%s%s%s", vendor[0] ? vendor : "unknown hypervisor",
		product[0] ? " " : "", product);
}

int
tune_host_read(const char *root, const char *profile, struct tune_host *h, char *err, size_t errsize)
{
	struct cpu_id id;
	int guest;

	memset(h, 0, sizeof(*h));
	h->root = root;
	node_info_read(root, &h->ni);
	if (topo_read(root, &h->topo, err, errsize) < 0)
		return APP_EIO;
	cpu_id_read(root, &id);
	h->cpu_family = id.family;
	h->cpu_model = id.model;
	guest = id.guest;
	read_kernel(h);
	read_hypervisor(h, guest);
	nvidia_driver_version(root, h->driver_version, sizeof(h->driver_version));
	if (profile == NULL)
		h->profile = profile_default(h->topo.n_gpus);
	else if ((h->profile = profile_get(profile)) == NULL) {
		snprintf(err, errsize, "no profile named '%s' (have: %s)", profile, profile_names());
		topo_free(&h->topo);
		return APP_EIO;
	}
	return 0;
}

void
tune_host_free(struct tune_host *h)
{
	topo_free(&h->topo);
}

int
tune_process_running(const struct tune_host *h, const char *comm)
{
	char **pids, path[64], name[32];
	int n, found = 0;

	pids = hostfs_list(h->root, "/proc", 1 << 20, &n);
	for (int i = 0; i < n && !found; i++) {
		if (!isdigit((unsigned char)pids[i][0]) || strlen(pids[i]) > 10)
			continue;
		snprintf(path, sizeof(path), "/proc/%s/comm", pids[i]);
		found = hostfs_read_line(h->root, path, name, sizeof(name)) == 0 && strcmp(name, comm) == 0;
	}
	hostfs_free_names(pids, n);
	return found;
}

void
tune_check(const struct tune_host *h, struct report *r)
{
	checks_cpu(h, r);
	checks_memory(h, r);
	checks_gpu(h, r);
	checks_pcie(h, r);
	checks_vm(h, r);
}
