/* What a profile changes on a host: the plan apply runs and revert undoes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "strfmt.h"
#include "apply.h"
#include "hostfs.h"

#define MEMLOCK_DROPIN "/etc/systemd/system.conf.d/60-privai-memlock.conf"
#define PEERMEM_CONF "/etc/modules-load.d/privai-peermem.conf"
#define PERSISTENCED_WANTS "/etc/systemd/system/multi-user.target.wants/nvidia-persistenced.service"

struct change *
plan_add(struct plan *p)
{
	struct change *c;

	if (p->n == p->cap) {
		int cap = p->cap ? p->cap * 2 : 64;
		struct change *grown = realloc(p->c, (size_t)cap * sizeof(*grown));
		if (grown == NULL)
			return NULL;
		p->c = grown;
		p->cap = cap;
	}
	c = &p->c[p->n++];
	memset(c, 0, sizeof(*c));
	return c;
}

static struct change *
add(struct plan *p, enum change_kind kind, const char *what, const char *path)
{
	struct change *c = plan_add(p);

	if (c == NULL)
		return NULL;
	c->kind = kind;
	snprintf(c->what, sizeof(c->what), "%s", what);
	snprintf(c->path, sizeof(c->path), "%s", path);
	return c;
}

/* A value written in place; left out when the host does not have it. */
static int
plan_attr(const struct tune_host *h, struct plan *p, const char *what, const char *path, const char *want)
{
	char cur[256];
	struct change *c;

	if (hostfs_read_line(h->root, path, cur, sizeof(cur)) < 0)
		return 0;
	if ((c = add(p, CHANGE_ATTR, what, path)) == NULL)
		return APP_EINVAL;
	snprintf(c->old, sizeof(c->old), "%s", cur);
	snprintf(c->new, sizeof(c->new), "%s", want);
	c->done = strcmp(cur, want) == 0;
	return 0;
}

/* A choice list: old keeps the whole list as read, so a copy of sysfs
 * (a fixture) gets back exactly what it held. */
static int
plan_selector(const struct tune_host *h, struct plan *p, const char *what, const char *path, const char *want)
{
	char cur[256], sel[64], padded[260], word[72];
	struct change *c;

	if (hostfs_read_line(h->root, path, cur, sizeof(cur)) < 0)
		return 0;
	if ((c = add(p, CHANGE_SELECTOR, what, path)) == NULL)
		return APP_EINVAL;
	snprintf(c->old, sizeof(c->old), "%s", cur);
	snprintf(c->new, sizeof(c->new), "%s", want);
	snprintf(padded, sizeof(padded), " %s ", cur);
	snprintf(word, sizeof(word), " %s ", want);
	if (thp_selected(cur, sel, sizeof(sel)) < 0) {
		c->done = 1;
		snprintf(c->note, sizeof(c->note), "left alone: '%.60s' is not a choice list", cur);
	} else if (strcmp(sel, want) == 0) {
		c->done = 1;
	} else if (strstr(padded, word) == NULL) {
		c->done = 1;
		snprintf(c->note, sizeof(c->note), "left alone: '%s' is not among '%.60s'", want, cur);
	}
	return 0;
}

static int
plan_file(const struct tune_host *h, struct plan *p, const char *what, const char *path, const char *contents)
{
	size_t len = 0;
	char *cur = hostfs_read_text(h->root, path, 4096, &len);
	struct change *c;

	if ((c = add(p, CHANGE_FILE, what, path)) == NULL) {
		free(cur);
		return APP_ENOMEM;
	}
	snprintf(c->new, sizeof(c->new), "%s", contents);
	c->existed = cur != NULL || hostfs_exists(h->root, path);
	if (cur != NULL && strcmp(cur, contents) == 0)
		c->done = 1;
	else if (cur != NULL && len < sizeof(c->old) && strlen(cur) == len)
		snprintf(c->old, sizeof(c->old), "%s", cur);
	else if (c->existed) {
		c->done = 1;
		snprintf(c->note, sizeof(c->note), "left alone: %s exists and is not one apply can record", path);
	}
	free(cur);
	return 0;
}

static int
plan_link(const struct tune_host *h, struct plan *p, const char *what, const char *path, const char *target)
{
	char cur[256];
	struct change *c;

	if ((c = add(p, CHANGE_LINK, what, path)) == NULL)
		return APP_EINVAL;
	snprintf(c->new, sizeof(c->new), "%s", target);
	if (hostfs_link_target(h->root, path, cur, sizeof(cur)) == 0) {
		c->done = 1;
		if (strcmp(cur, target) != 0)
			msg_fmt(c->note, sizeof(c->note), "left alone: %s already links to %s", path, cur);
	} else if (hostfs_exists(h->root, path)) {
		c->done = c->existed = 1;
		snprintf(c->note, sizeof(c->note), "left alone: %s exists and is not a link", path);
	}
	return 0;
}

static int
contains_word(const char *list, const char *word)
{
	char padded[300], w[72];

	snprintf(padded, sizeof(padded), " %s ", list);
	snprintf(w, sizeof(w), " %s ", word);
	return strstr(padded, w) != NULL;
}

static int
plan_cpus(const struct tune_host *h, struct plan *p)
{
	char **cpus, path[160], avail[256];
	int n, rc = 0;

	cpus = hostfs_list(h->root, "/sys/devices/system/cpu", 8192, &n);
	/* preference first: intel_pstate refuses it once the governor is performance */
	for (int pass = 0; pass < 2 && rc == 0; pass++)
		for (int i = 0; i < n && rc == 0; i++) {
			const char *file = pass == 0 ? "energy_performance_preference" : "scaling_governor";
			const char *list =
				pass == 0 ? "energy_performance_available_preferences" : "scaling_available_governors";
			const char *want = pass == 0 ? h->profile->epp : h->profile->governor;
			if (strncmp(cpus[i], "cpu", 3) != 0 || cpus[i][3] < '0' || cpus[i][3] > '9')
				continue;
			snprintf(path, sizeof(path), "/sys/devices/system/cpu/%s/cpufreq/%s", cpus[i], list);
			if (hostfs_read_line(h->root, path, avail, sizeof(avail)) == 0 && !contains_word(avail, want))
				continue;
			snprintf(path, sizeof(path), "/sys/devices/system/cpu/%s/cpufreq/%s", cpus[i], file);
			rc = plan_attr(h, p, pass == 0 ? "CPU energy preference" : "CPU governor", path, want);
		}
	hostfs_free_names(cpus, n);
	return rc;
}

/* Each RDMA NIC's interrupts onto the CPUs of its own NUMA node. */
static int
plan_irqs(const struct tune_host *h, struct plan *p)
{
	const struct topo *t = &h->topo;
	int rc = 0;

	for (int k = 0; k < t->n_nics && rc == 0; k++) {
		const struct pci_dev *d = &t->bus.dev[t->nic[k]];
		const char *cpus = NULL;
		char dir[96], path[96], **irqs;
		int n;
		for (int i = 0; i < h->ni.numa_nodes; i++)
			if (h->ni.numa[i].id == d->numa_node && h->ni.numa[i].cpulist[0])
				cpus = h->ni.numa[i].cpulist;
		if (cpus == NULL)
			continue;
		snprintf(dir, sizeof(dir), "/sys/bus/pci/devices/%s/msi_irqs", d->bdf);
		irqs = hostfs_list(h->root, dir, 4096, &n);
		for (int i = 0; i < n && rc == 0; i++) {
			if (strspn(irqs[i], "0123456789") != strlen(irqs[i]) || strlen(irqs[i]) > 7)
				continue;
			snprintf(path, sizeof(path), "/proc/irq/%s/smp_affinity_list", irqs[i]);
			rc = plan_attr(h, p, "NIC interrupt affinity", path, cpus);
		}
		hostfs_free_names(irqs, n);
	}
	return rc;
}

static int
plan_gpu(const struct tune_host *h, struct plan *p)
{
	static const char *const units[] = { "/lib/systemd/system/nvidia-persistenced.service",
					     "/usr/lib/systemd/system/nvidia-persistenced.service" };

	if (!h->profile->gpu || h->topo.n_gpus == 0)
		return 0;
	for (int i = 0; i < 2; i++)
		if (hostfs_exists(h->root, units[i])) {
			if (plan_link(h, p, "GPU persistence daemon", PERSISTENCED_WANTS, units[i]) < 0)
				return APP_EINVAL;
			break;
		}
	if (h->topo.n_nics > 0 && plan_file(h, p, "GPUDirect RDMA module", PEERMEM_CONF, "nvidia_peermem\n") < 0)
		return APP_EINVAL;
	return 0;
}

int
apply_plan(const struct tune_host *h, struct plan *p, char *err, size_t errsize)
{
	const struct profile *pr = h->profile;
	char num[32];
	int rc = 0;

	memset(p, 0, sizeof(*p));
	rc |= plan_cpus(h, p);
	rc |= plan_selector(h, p, "Transparent huge pages", "/sys/kernel/mm/transparent_hugepage/enabled", pr->thp);
	snprintf(num, sizeof(num), "%ld", pr->hugepages);
	rc |= plan_attr(h, p, "Static huge pages", "/proc/sys/vm/nr_hugepages", num);
	if (h->ni.numa_nodes > 1) {
		snprintf(num, sizeof(num), "%ld", pr->numa_balancing);
		rc |= plan_attr(h, p, "NUMA balancing", "/proc/sys/kernel/numa_balancing", num);
	}
	snprintf(num, sizeof(num), "%ld", pr->swappiness);
	rc |= plan_attr(h, p, "Swappiness", "/proc/sys/vm/swappiness", num);
	if (pr->memlock_unlimited || h->topo.n_nics > 0)
		rc |= plan_file(h, p, "Locked-memory limit", MEMLOCK_DROPIN,
				"# privai-tune: RDMA pins what it registers; services may lock all memory\n"
				"[Manager]\nDefaultLimitMEMLOCK=infinity\n");
	rc |= plan_irqs(h, p);
	rc |= plan_gpu(h, p);
	if (rc != 0) {
		snprintf(err, errsize, "out of memory planning the changes");
		plan_free(p);
		return APP_ENOMEM;
	}
	return 0;
}

void
plan_free(struct plan *p)
{
	free(p->c);
	memset(p, 0, sizeof(*p));
}

void
plan_print(const struct plan *p, FILE *out, const char *verb)
{
	int changed = 0;

	for (int i = 0; i < p->n; i++) {
		const struct change *c = &p->c[i];
		int same = 0, first = 1;
		if (c->note[0])
			fprintf(out, "  %-24s %s\n", c->what, c->note);
		if (c->done)
			continue;
		/* one line for a run of the same change on many files (224 CPUs) */
		for (int j = 0; j < i && first; j++)
			first = !(!p->c[j].done && strcmp(p->c[j].what, c->what) == 0 &&
				  strcmp(p->c[j].old, c->old) == 0 && strcmp(p->c[j].new, c->new) == 0);
		if (!first)
			continue;
		for (int j = i; j < p->n; j++)
			same += !p->c[j].done && strcmp(p->c[j].what, c->what) == 0 &&
				strcmp(p->c[j].old, c->old) == 0 && strcmp(p->c[j].new, c->new) == 0;
		changed += same;
		if (c->kind == CHANGE_FILE)
			fprintf(out, "  %-24s %s %s\n", c->what, c->existed ? "rewrite" : "create", c->path);
		else if (c->kind == CHANGE_LINK)
			fprintf(out, "  %-24s link %s -> %s\n", c->what, c->path, c->new);
		else if (same > 1)
			fprintf(out, "  %-24s %s -> %s (%d files like %s)\n", c->what, c->old, c->new, same, c->path);
		else
			fprintf(out, "  %-24s %s -> %s (%s)\n", c->what, c->old, c->new, c->path);
	}
	fprintf(out, "%s %d change%s\n", verb, changed, changed == 1 ? "" : "s");
}
