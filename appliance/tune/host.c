/* Reading the host once for every check. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostfs.h"
#include "tune.h"

/* From the first processor of /proc/cpuinfo (read once, it can be MiBs):
 * "cpu family\t: 6", "model\t\t: 143", and whether its flags carry
 * "hypervisor", which every guest sees. */
static void
read_cpuinfo(struct tune_host *h, int *guest)
{
	char *text = hostfs_read_text(h->root, "/proc/cpuinfo", HOSTFS_TEXT_MAX, NULL), *line, *save = NULL;
	int flags_seen = 0;

	h->cpu_family = h->cpu_model = -1;
	*guest = 0;
	if (text == NULL)
		return;
	for (line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
		char *colon = strchr(line, ':'), *end;
		size_t k;
		long v;
		if (colon == NULL)
			continue;
		if (h->cpu_family >= 0 && h->cpu_model >= 0 && flags_seen)
			break;
		for (k = (size_t)(colon - line); k > 0 && isspace((unsigned char)line[k - 1]); k--)
			;
		if (k == 5 && strncmp(line, "flags", 5) == 0 && !flags_seen) {
			const char *p = strstr(colon, " hypervisor");
			flags_seen = 1;
			*guest = p != NULL && (p[11] == ' ' || p[11] == '\0');
			continue;
		}
		v = strtol(colon + 1, &end, 10);
		if (end == colon + 1 || v < 0 || v > 4096)
			continue;
		if (k == 10 && strncmp(line, "cpu family", 10) == 0 && h->cpu_family < 0)
			h->cpu_family = (int)v;
		else if (k == 5 && strncmp(line, "model", 5) == 0 && h->cpu_model < 0)
			h->cpu_model = (int)v;
	}
	free(text);
}

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
	snprintf(h->hypervisor, sizeof(h->hypervisor), "%s%s%s", vendor[0] ? vendor : "unknown hypervisor",
		 product[0] ? " " : "", product);
}

int
tune_host_read(const char *root, const char *profile, struct tune_host *h, char *err, size_t errsize)
{
	int guest;

	memset(h, 0, sizeof(*h));
	h->root = root;
	node_info_read(root, &h->ni);
	if (topo_read(root, &h->topo, err, errsize) < 0)
		return -1;
	read_cpuinfo(h, &guest);
	read_kernel(h);
	read_hypervisor(h, guest);
	if (hostfs_read_line(root, "/sys/module/nvidia/version", h->driver_version, sizeof(h->driver_version)) < 0)
		h->driver_version[0] = '\0';
	if (profile == NULL)
		h->profile = profile_default(h->topo.n_gpus);
	else if ((h->profile = profile_get(profile)) == NULL) {
		snprintf(err, errsize, "no profile named '%s' (have: %s)", profile, profile_names());
		topo_free(&h->topo);
		return -1;
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
