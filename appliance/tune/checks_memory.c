/* Memory checks: transparent and static huge pages, NUMA balancing, swap, memlock. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "hostfs.h"
#include "systemd_conf.h"
#include "tune.h"

/* "always [madvise] never" -> "madvise"; -1 when no bracketed choice. */
int
thp_selected(const char *line, char *out, size_t size)
{
	const char *open = strchr(line, '['), *close;

	if (open == NULL || (close = strchr(open, ']')) == NULL || close == open + 1 || (size_t)(close - open) > size)
		return APP_ENOTFOUND;
	snprintf(out, size, "%.*s", (int)(close - open - 1), open + 1);
	return 0;
}

static void
check_thp(const struct tune_host *h, struct report *r)
{
	char line[128], mode[32];
	struct check *c;

	if (hostfs_read_line(h->root, "/sys/kernel/mm/transparent_hugepage/enabled", line, sizeof(line)) < 0) {
		c = report_add(r, "mem.thp", "Transparent huge pages", CHECK_SKIP);
		report_found(c,
			     "the kernel has no transparent huge pages (/sys/kernel/mm/transparent_hugepage/enabled)");
		return;
	}
	if (thp_selected(line, mode, sizeof(mode)) < 0) {
		c = report_add(r, "mem.thp", "Transparent huge pages", CHECK_WARN);
		report_found(c, "unreadable setting '%.60s'", line);
		report_expected(c, "%s", h->profile->thp);
		report_fix(c, "privai-tune apply --profile %s", h->profile->name);
		return;
	}
	c = report_add(r, "mem.thp", "Transparent huge pages",
		       strcmp(mode, h->profile->thp) == 0 ? CHECK_PASS : CHECK_WARN);
	report_found(c, "%s", mode);
	report_expected(c, "%s: huge pages where the engine asks, no compaction stalls elsewhere", h->profile->thp);
	if (c->status != CHECK_PASS)
		report_fix(c, "privai-tune apply --profile %s (writes transparent_hugepage/enabled)", h->profile->name);
}

static void
check_hugepages(const struct tune_host *h, struct report *r)
{
	long long n, kb = 2048;
	char *meminfo = hostfs_read_text(h->root, "/proc/meminfo", 1 << 16, NULL), *p;
	struct check *c;
	int rc = hostfs_read_long(h->root, "/proc/sys/vm/nr_hugepages", 10, &n);

	if (meminfo != NULL && (p = strstr(meminfo, "Hugepagesize:")) != NULL)
		kb = strtoll(p + 13, NULL, 10) > 0 ? strtoll(p + 13, NULL, 10) : 2048;
	free(meminfo);
	if (rc != 0 || n < 0) {
		c = report_add(r, "mem.hugepages", "Static huge pages", rc == APP_ENOTFOUND ? CHECK_SKIP : CHECK_WARN);
		report_found(c, rc == APP_ENOTFOUND ? "/proc/sys/vm/nr_hugepages cannot be read"
						    : "/proc/sys/vm/nr_hugepages holds no number");
		return;
	}
	c = report_add(r, "mem.hugepages", "Static huge pages", n == h->profile->hugepages ? CHECK_PASS : CHECK_WARN);
	report_found(c, "%lld reserved (%lld MiB)", n, n * kb / 1024);
	report_expected(c, "%ld: the engine allocates with malloc and mmap, never from hugetlbfs",
			h->profile->hugepages);
	if (c->status != CHECK_PASS)
		report_fix(c, "privai-tune apply --profile %s (returns the pages; revert reserves them again)",
			   h->profile->name);
}

static void
check_numa_balancing(const struct tune_host *h, struct report *r)
{
	struct check *c;
	long long v;
	int rc;

	if (h->ni.numa_nodes < 2) {
		c = report_add(r, "mem.numa_balancing", "Automatic NUMA balancing", CHECK_SKIP);
		report_found(c, "one NUMA node: nothing to balance");
		return;
	}
	if ((rc = hostfs_read_long(h->root, "/proc/sys/kernel/numa_balancing", 10, &v)) != 0 || v < 0 || v > 3) {
		c = report_add(r, "mem.numa_balancing", "Automatic NUMA balancing",
			       rc == APP_ENOTFOUND ? CHECK_SKIP : CHECK_WARN);
		report_found(c, "%s",
			     rc == APP_ENOTFOUND ? "the kernel has no kernel.numa_balancing"
						 : "kernel.numa_balancing holds no setting");
		report_expected(c, "%ld", h->profile->numa_balancing);
		return;
	}
	c = report_add(r, "mem.numa_balancing", "Automatic NUMA balancing",
		       v == h->profile->numa_balancing ? CHECK_PASS : CHECK_WARN);
	report_found(c, "kernel.numa_balancing = %lld", v);
	report_expected(c,
			"%ld: the engine pins its threads and memory per socket; migrating pages behind it costs "
			"bandwidth",
			h->profile->numa_balancing);
	if (c->status != CHECK_PASS)
		report_fix(c, "privai-tune apply --profile %s (sysctl kernel.numa_balancing)", h->profile->name);
}

static void
check_swap(const struct tune_host *h, struct report *r)
{
	char *swaps = hostfs_read_text(h->root, "/proc/swaps", 1 << 16, NULL), *p;
	int devices = 0;
	long long swappiness = -1;
	struct check *c;

	if (swaps == NULL) {
		c = report_add(r, "mem.swap", "Swap", CHECK_SKIP);
		report_found(c, "/proc/swaps cannot be read");
		return;
	}
	for (p = strchr(swaps, '\n'); p != NULL && p[1] != '\0'; p = strchr(p + 1, '\n'))
		devices += p[1] == '/';
	free(swaps);
	hostfs_read_long(h->root, "/proc/sys/vm/swappiness", 10, &swappiness);
	if (devices == 0) {
		c = report_add(r, "mem.swap", "Swap", CHECK_PASS);
		report_found(c, "no swap");
	} else if (swappiness >= 0 && swappiness <= h->profile->swappiness_max) {
		c = report_add(r, "mem.swap", "Swap", CHECK_PASS);
		report_found(c, "%d swap device%s, vm.swappiness = %lld", devices, devices == 1 ? "" : "s", swappiness);
	} else {
		c = report_add(r, "mem.swap", "Swap", CHECK_WARN);
		report_found(c, "%d swap device%s, vm.swappiness = %lld", devices, devices == 1 ? "" : "s", swappiness);
		report_fix(c, "privai-tune apply --profile %s (vm.swappiness = %ld), or swapoff -a", h->profile->name,
			   h->profile->swappiness);
	}
	report_expected(c, "no swap, or vm.swappiness <= %ld: weights paged out stall every token",
			h->profile->swappiness_max);
}

static void
check_memlock(const struct tune_host *h, struct report *r)
{
	char value[64], where[160];
	struct check *c;
	int rdma = h->topo.n_nics > 0;

	if (!rdma) {
		c = report_add(r, "mem.memlock", "Locked-memory limit for services", CHECK_SKIP);
		report_found(c, "no RDMA NIC: nothing pins memory");
		return;
	}
	systemd_conf_get(h->root, "system.conf", "Manager", "DefaultLimitMEMLOCK", value, sizeof(value), where,
			 sizeof(where));
	if (strcmp(value, "infinity") == 0) {
		c = report_add(r, "mem.memlock", "Locked-memory limit for services", CHECK_PASS);
		report_found(c, "DefaultLimitMEMLOCK=infinity (%s)", where);
	} else {
		c = report_add(r, "mem.memlock", "Locked-memory limit for services", CHECK_FAIL);
		report_found(c, "DefaultLimitMEMLOCK=%s (%s)", value[0] ? value : "8M",
			     value[0] ? where : "systemd's default");
		report_fix(c,
			   "privai-tune apply --profile gpu-inference (a drop-in in /etc/systemd/system.conf.d, then "
			   "systemctl daemon-reexec)");
	}
	report_expected(c, "infinity: RDMA pins every buffer it registers, and NCCL registers gigabytes");
}

void
checks_memory(const struct tune_host *h, struct report *r)
{
	check_thp(h, r);
	check_hugepages(h, r);
	check_numa_balancing(h, r);
	check_swap(h, r);
	check_memlock(h, r);
}
