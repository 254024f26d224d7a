/* procfs counters of this node (metrics/host_stats.h). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostfs.h"
#include "metrics/host_stats.h"

#define PROC_TEXT_MAX (1 << 20)

static void
read_cpu(const char *root, struct host_counters *c)
{
	char line[512];
	uint64_t v[10] = { 0 };

	if (hostfs_read_line(root, "/proc/stat", line, sizeof(line)) != 0 || strncmp(line, "cpu ", 4) != 0)
		return;
	/* user nice system idle iowait irq softirq steal guest guest_nice:
	 * guest time is already in user, so it is not added twice */
	int n = sscanf(line + 4,
		       "%" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64,
		       &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]);
	if (n < 4)
		return;
	c->cpu_total = v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
	c->cpu_busy = c->cpu_total - v[3] - v[4];
	c->ok_cpu = 1;
}

static void
read_mem(const char *root, struct host_counters *c)
{
	size_t len;
	char *t = hostfs_read_text(root, "/proc/meminfo", PROC_TEXT_MAX, &len);
	const char *p;
	int have = 0;

	if (t == NULL)
		return;
	if ((p = strstr(t, "MemTotal:")) != NULL && sscanf(p + 9, "%lf", &c->mem_total) == 1)
		have++;
	/* MemAvailable since Linux 3.14; MemFree, which understates it, before */
	if ((p = strstr(t, "MemAvailable:")) != NULL && sscanf(p + 13, "%lf", &c->mem_avail) == 1)
		have++;
	else if ((p = strstr(t, "MemFree:")) != NULL && sscanf(p + 8, "%lf", &c->mem_avail) == 1)
		have++;
	c->mem_total *= 1024;
	c->mem_avail *= 1024;
	c->ok_mem = have == 2 && c->mem_total > 0;
	free(t);
}

static void
read_net(const char *root, struct host_counters *c)
{
	size_t len;
	char *t = hostfs_read_text(root, "/proc/net/dev", PROC_TEXT_MAX, &len), *save = NULL;

	if (t == NULL)
		return;
	/* two header lines, then "  name: rx_bytes packets ... tx_bytes ..." */
	for (char *line = strtok_r(t, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
		char *colon = strchr(line, ':');
		uint64_t rx, tx, skip;
		if (colon == NULL)
			continue;
		*colon = '\0';
		while (*line == ' ')
			line++;
		if (strcmp(line, "lo") == 0)
			continue;
		if (sscanf(colon + 1,
			   "%" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64
			   " %" SCNu64 " %" SCNu64,
			   &rx, &skip, &skip, &skip, &skip, &skip, &skip, &skip, &tx) == 9) {
			c->rx_bytes += rx;
			c->tx_bytes += tx;
			c->ok_net = 1;
		}
	}
	free(t);
}

void
host_counters_read(const char *root, struct host_counters *c)
{
	char line[128];

	memset(c, 0, sizeof(*c));
	c->load1 = -1;
	read_cpu(root, c);
	read_mem(root, c);
	read_net(root, c);
	if (hostfs_read_line(root, "/proc/loadavg", line, sizeof(line)) == 0)
		c->load1 = strtod(line, NULL);
}

double
host_cpu_pct(const struct host_counters *now, const struct host_counters *before)
{
	if (!now->ok_cpu || !before->ok_cpu || now->cpu_total <= before->cpu_total || now->cpu_busy < before->cpu_busy)
		return NAN;
	return 100.0 * (double)(now->cpu_busy - before->cpu_busy) / (double)(now->cpu_total - before->cpu_total);
}
