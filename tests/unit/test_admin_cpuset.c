/*
 * CPU sets for CPU deployments (appliance/admin/deploy/cpuset.c): CPUs of
 * one NUMA node when one has enough free, the lowest free ones otherwise,
 * the held ones last when oversubscribed, the shared pool, and the
 * cpuset(7) list format; NUMA nodes read from a scratch sysfs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testlib.h"
#include "deploy/cpuset.h"

static cpu_set_t
set_of(const int *cpus, int n)
{
	cpu_set_t s;

	CPU_ZERO(&s);
	for (int i = 0; i < n; i++)
		CPU_SET(cpus[i], &s);
	return s;
}

static const char *
list(const cpu_set_t *s)
{
	static char buf[256];

	cpuset_format(s, buf, sizeof(buf));
	return buf;
}

static void
write_node(const char *root, int node, const char *cpulist)
{
	char path[512];

	snprintf(path, sizeof(path), "%s/devices/system/node/node%d", root, node);
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", path);
	if (system(cmd) != 0)
		return;
	strcat(path, "/cpulist");
	FILE *f = fopen(path, "w");
	if (f != NULL) {
		fputs(cpulist, f);
		fclose(f);
	}
}

int
main(void)
{
	char root[] = "/tmp/privai-cpuset-XXXXXX";
	cpu_set_t avail, held, out;
	int node;

	if (mkdtemp(root) == NULL) {
		CHECK(0, "mkdtemp");
		return test_summary();
	}
	write_node(root, 0, "0-3\n");
	write_node(root, 1, "4-7\n");
	write_node(root, 2, "garbage\n"); /* unreadable: not a node */
	avail = set_of((const int[]){ 0, 1, 2, 3, 4, 5, 6, 7 }, 8);

	held = set_of((const int[]){ 0, 1, 4 }, 3);
	CHECK(cpuset_pick(&avail, &held, 3, root, &out, &node) == 3 && strcmp(list(&out), "5-7") == 0 && node == 1,
	      "three CPUs: node 1, the one with three free: %s on node %d", list(&out), node);
	CHECK(cpuset_pick(&avail, &held, 2, root, &out, &node) == 2 && strcmp(list(&out), "5-6") == 0 && node == 1,
	      "two CPUs: the node with the most free: %s on node %d", list(&out), node);
	CHECK(cpuset_pick(&avail, &held, 4, root, &out, &node) == 4 && strcmp(list(&out), "2-3,5-6") == 0 && node == -1,
	      "four CPUs, no node with four free: the lowest free ones, %s on node %d", list(&out), node);

	held = set_of((const int[]){ 4, 5 }, 2);
	CHECK(cpuset_pick(&avail, &held, 2, root, &out, &node) == 2 && strcmp(list(&out), "0-1") == 0 && node == 0,
	      "the node with the most free, not the last that fits: %s on node %d", list(&out), node);

	held = set_of((const int[]){ 0, 1, 2, 3, 4, 5, 6 }, 7);
	CHECK(cpuset_pick(&avail, &held, 3, root, &out, &node) == 3 && strcmp(list(&out), "0-1,7") == 0,
	      "oversubscribed: the free one, then the lowest held: %s", list(&out));
	CHECK(cpuset_pick(&avail, &held, 20, root, &out, &node) == 8 && strcmp(list(&out), "0-7") == 0,
	      "more than there are: all of them, %s", list(&out));

	/* one node (no sysfs): never a node of its own */
	CPU_ZERO(&held);
	CHECK(cpuset_pick(&avail, &held, 2, "/nonexistent", &out, &node) == 2 && strcmp(list(&out), "0-1") == 0 &&
		      node == -1,
	      "without NUMA nodes: the lowest, no node: %s on %d", list(&out), node);

	held = set_of((const int[]){ 1, 2 }, 2);
	cpuset_shared(&avail, &held, &out);
	CHECK(strcmp(list(&out), "0,3-7") == 0, "the shared pool: what no one holds, %s", list(&out));
	cpuset_shared(&avail, &avail, &out);
	CHECK(strcmp(list(&out), "0-7") == 0, "all held: the pool is every CPU, %s", list(&out));
	CPU_ZERO(&out);
	CHECK(strcmp(list(&out), "") == 0, "an empty set prints as nothing");

	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	CHECK(system(cmd) == 0, "scratch sysfs removed");
	return test_summary();
}
