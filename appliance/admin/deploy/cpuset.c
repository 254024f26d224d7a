/* CPU sets for CPU deployments (see deploy/cpuset.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deploy/cpuset.h"

#define MAX_NODES CPUSET_MAX_NODES

/* A cpulist ("0-3,8") into s; 0, or -1 when it does not parse. */
static int
parse_list(const char *text, cpu_set_t *s)
{
	const char *p = text;

	CPU_ZERO(s);
	while (*p != '\0' && *p != '\n') {
		char *end;
		long lo = strtol(p, &end, 10), hi = lo;
		if (end == p || lo < 0)
			return -1;
		p = end;
		if (*p == '-') {
			hi = strtol(p + 1, &end, 10);
			if (end == p + 1 || hi < lo)
				return -1;
			p = end;
		}
		for (long c = lo; c <= hi && c < CPU_SETSIZE; c++)
			CPU_SET((int)c, s);
		if (*p == ',')
			p++;
		else if (*p != '\0' && *p != '\n')
			return -1;
	}
	return 0;
}

/* The NUMA nodes' CPUs under sysfs_root; how many nodes were read. */
static int
read_nodes(const char *sysfs_root, cpu_set_t *nodes, int *ids)
{
	int n = 0;

	for (int i = 0; i < MAX_NODES && n < MAX_NODES; i++) {
		char path[512], line[4096];
		snprintf(path, sizeof(path), "%s/devices/system/node/node%d/cpulist", sysfs_root, i);
		FILE *f = fopen(path, "r");
		if (f == NULL)
			continue;
		int ok = fgets(line, sizeof(line), f) != NULL && parse_list(line, &nodes[n]) == 0;
		fclose(f);
		if (ok)
			ids[n++] = i;
	}
	return n;
}

/* Up to n CPUs of from, lowest first, added to out; how many. */
static int
take(const cpu_set_t *from, int n, cpu_set_t *out)
{
	int got = 0;

	for (int c = 0; c < CPU_SETSIZE && got < n; c++)
		if (CPU_ISSET(c, from) && !CPU_ISSET(c, out)) {
			CPU_SET(c, out);
			got++;
		}
	return got;
}

int
cpuset_pick(const cpu_set_t *avail, const cpu_set_t *held, int n, const char *sysfs_root, cpu_set_t *out, int *node)
{
	cpu_set_t nodes[MAX_NODES];
	int ids[MAX_NODES], nn = read_nodes(sysfs_root, nodes, ids), best = -1, best_free = 0;
	cpu_set_t free_set;

	CPU_ZERO(out);
	*node = -1;
	CPU_ZERO(&free_set);
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, avail) && !CPU_ISSET(c, held))
			CPU_SET(c, &free_set);
	/* the node with the most free CPUs, if it has enough: one memory
	 * controller, one last-level cache */
	for (int i = 0; nn > 1 && i < nn; i++) {
		cpu_set_t f;
		CPU_AND(&f, &free_set, &nodes[i]);
		if (CPU_COUNT(&f) >= n && CPU_COUNT(&f) > best_free) {
			best = i;
			best_free = CPU_COUNT(&f);
		}
	}
	if (best >= 0) {
		cpu_set_t f;
		CPU_AND(&f, &free_set, &nodes[best]);
		*node = ids[best];
		return take(&f, n, out);
	}
	int got = take(&free_set, n, out);
	return got + take(avail, n - got, out);
}

void
cpuset_shared(const cpu_set_t *avail, const cpu_set_t *held, cpu_set_t *out)
{
	CPU_ZERO(out);
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, avail) && !CPU_ISSET(c, held))
			CPU_SET(c, out);
	if (CPU_COUNT(out) == 0)
		*out = *avail;
}

int
cpuset_home_node(const cpu_set_t *avail, const cpu_set_t *held, const int sharers[CPUSET_MAX_NODES],
		 const char *sysfs_root)
{
	cpu_set_t nodes[MAX_NODES];
	int ids[MAX_NODES], nn = read_nodes(sysfs_root, nodes, ids), best = -1, best_free = -1;

	for (int i = 0; nn > 1 && i < nn; i++) {
		cpu_set_t mine, free_set;
		CPU_AND(&mine, &nodes[i], avail);
		if (CPU_COUNT(&mine) == 0)
			continue;
		CPU_XOR(&free_set, &mine, held);
		CPU_AND(&free_set, &free_set, &mine); /* mine and not held */
		int f = CPU_COUNT(&free_set);
		if (best < 0 || sharers[ids[i]] < sharers[ids[best]] ||
		    (sharers[ids[i]] == sharers[ids[best]] && f > best_free)) {
			best = i;
			best_free = f;
		}
	}
	return best < 0 ? -1 : ids[best];
}

void
cpuset_shared_on(const cpu_set_t *avail, const cpu_set_t *held, int node, const char *sysfs_root, cpu_set_t *out)
{
	cpu_set_t nodes[MAX_NODES];
	int ids[MAX_NODES], nn = node >= 0 ? read_nodes(sysfs_root, nodes, ids) : 0;

	for (int i = 0; i < nn; i++) {
		cpu_set_t mine;
		if (ids[i] != node)
			continue;
		CPU_AND(&mine, &nodes[i], avail);
		if (CPU_COUNT(&mine) == 0)
			break;
		cpuset_shared(&mine, held, out);
		return;
	}
	cpuset_shared(avail, held, out);
}

int
cpuset_node_of(const cpu_set_t *set, const char *sysfs_root)
{
	cpu_set_t nodes[MAX_NODES];
	int ids[MAX_NODES], nn = read_nodes(sysfs_root, nodes, ids);

	for (int i = 0; nn > 1 && i < nn && CPU_COUNT(set) > 0; i++) {
		cpu_set_t in;
		CPU_AND(&in, set, &nodes[i]);
		if (CPU_EQUAL(&in, set))
			return ids[i];
	}
	return -1;
}

void
cpuset_format(const cpu_set_t *s, char *out, size_t size)
{
	size_t len = 0;

	out[0] = '\0';
	for (int c = 0; c < CPU_SETSIZE; c++) {
		if (!CPU_ISSET(c, s))
			continue;
		int e = c;
		while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, s))
			e++;
		if (len < size)
			len += (size_t)(e > c ? snprintf(out + len, size - len, "%s%d-%d", len ? "," : "", c, e)
					      : snprintf(out + len, size - len, "%s%d", len ? "," : "", c));
		c = e;
	}
}
