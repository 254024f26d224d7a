/*
 * CPU sets for CPU deployments (appliance/admin/deploy/cpuset.c): CPUs of
 * one NUMA node when one has enough free, the lowest free ones otherwise,
 * the held ones last when oversubscribed, the shared pool, and the
 * cpuset(7) list format; NUMA nodes read from a scratch sysfs.  Then a
 * real child started by the runner on a node: its memory policy, as the
 * kernel's numa_maps shows it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testlib.h"
#include "deploy/cpuset.h"
#include "deploy/runner.h"

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

/* Start `sh -c 'cat /proc/self/numa_maps'` as an engine on this
 * process's CPUs and `node`, through the child runner; its log into buf.
 * Returns its exit status, or -1. */
static int
run_child_on_node(const char *dir, int node, char *buf, size_t size)
{
	char *argv[] = { "/bin/sh", "-c", "cat /proc/self/numa_maps", NULL };
	char log_path[512], note[256], err[512];
	struct engine_cpus cpus = { .node = node };
	struct runner *r = NULL;
	int status = -1, rc = -1;
	pid_t pid;

	snprintf(log_path, sizeof(log_path), "%s/engine-%d.log", dir, node);
	int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
	if (fd < 0 || sched_getaffinity(0, sizeof(cpus.set), &cpus.set) != 0 ||
	    runner_open(RUNNER_CHILD, "t", &r, note, sizeof(note), err) < 0) {
		CHECK(0, "child runner: %s", err);
		goto out;
	}
	if (runner_start(r, 1, "numa", argv, log_path, fd, &cpus, &pid, err) < 0) {
		CHECK(0, "runner_start: %s", err);
		goto out;
	}
	/* a deadline, not a timing */
	for (int i = 0; i < 1000 && (rc = runner_wait(r, 1, pid, &status, note, sizeof(note), err)) == 1; i++)
		nanosleep(&(struct timespec){ 0, 10000000 }, NULL);
	if (rc != 0) {
		CHECK(0, "the child ended: %s", err);
		goto out;
	}
	FILE *f = fopen(log_path, "r");
	size_t n = f != NULL ? fread(buf, 1, size - 1, f) : 0;
	buf[n] = '\0';
	if (f != NULL)
		fclose(f);
	rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
out:
	if (fd >= 0)
		close(fd);
	runner_close(r);
	return rc;
}

/* Whether every mapping line of numa_maps text has `policy` as its
 * second field (and there is one). */
static int
all_policies(const char *text, const char *policy)
{
	int lines = 0;

	for (const char *ln = text; *ln != '\0'; lines++) {
		const char *sp = strchr(ln, ' ');
		size_t n = strlen(policy);
		if (sp == NULL || strncmp(sp + 1, policy, n) != 0 || (sp[1 + n] != ' ' && sp[1 + n] != '\n'))
			return 0;
		const char *nl = strchr(ln, '\n');
		ln = nl != NULL ? nl + 1 : ln + strlen(ln);
	}
	return lines > 0;
}

/* A child engine placed on a NUMA node allocates from that node alone
 * (MPOL_BIND, kept across exec), as a unit's AllowedMemoryNodes= does;
 * one without a node keeps the default policy; a node the kernel does
 * not have fails the start with a line in the log that says why. */
static void
test_child_memory(const char *dir)
{
	static char buf[1 << 16];

	if (access("/sys/devices/system/node/node0", F_OK) != 0 || access("/proc/self/numa_maps", R_OK) != 0) {
		SKIP("no NUMA node 0 or numa_maps here: the engine's memory binding is not checked");
		return;
	}
	int rc = run_child_on_node(dir, 0, buf, sizeof(buf));
	CHECK(rc == 0 && all_policies(buf, "bind:0"), "a child on node 0 maps every page bound to node 0 (%d): %.120s",
	      rc, buf);
	rc = run_child_on_node(dir, -1, buf, sizeof(buf));
	CHECK(rc == 0 && all_policies(buf, "default"), "a child on no node keeps the default policy (%d): %.120s", rc,
	      buf);
	rc = run_child_on_node(dir, 1000, buf, sizeof(buf));
	CHECK(rc == 127 && strstr(buf, "could not be bound to its NUMA node (set_mempolicy)") != NULL,
	      "a node the kernel lacks: exit 127 and the reason in the log (%d): %.200s", rc, buf);
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

	/* shared engines on a host of two nodes: one engine a node */
	int sharers[CPUSET_MAX_NODES] = { 0 };
	held = set_of((const int[]){ 0 }, 1);
	CHECK(cpuset_home_node(&avail, &held, sharers, root) == 1, "the first shared engine: the node with most free");
	sharers[1] = 1;
	CHECK(cpuset_home_node(&avail, &held, sharers, root) == 0,
	      "the second: the node without one, though it has fewer free CPUs");
	sharers[0] = 1;
	CHECK(cpuset_home_node(&avail, &held, sharers, root) == 1, "the third: as many on each, then the most free");
	CPU_ZERO(&held);
	sharers[1] = 0;
	sharers[0] = 0;
	CHECK(cpuset_home_node(&avail, &held, sharers, root) == 0, "equal in all: the lowest node");
	held = set_of((const int[]){ 4 }, 1);
	sharers[0] = 1;
	CHECK(cpuset_home_node(&avail, &held, sharers, root) == 1,
	      "a later node with fewer shared engines wins over one with more free CPUs");
	sharers[0] = 0;
	CPU_ZERO(&held);
	cpu_set_t low = set_of((const int[]){ 0, 1, 2, 3 }, 4);
	CHECK(cpuset_home_node(&low, &held, sharers, root) == 0, "a node without CPUs this admin may use is no home");
	CHECK(cpuset_home_node(&avail, &held, sharers, "/nonexistent") == -1, "one node (no sysfs): no home");

	held = set_of((const int[]){ 4, 5 }, 2);
	cpuset_shared_on(&avail, &held, 1, root, &out);
	CHECK(strcmp(list(&out), "6-7") == 0, "at home on node 1: its free CPUs only, %s", list(&out));
	cpuset_shared_on(&avail, &held, 0, root, &out);
	CHECK(strcmp(list(&out), "0-3") == 0, "at home on node 0: %s", list(&out));
	held = set_of((const int[]){ 4, 5, 6, 7 }, 4);
	cpuset_shared_on(&avail, &held, 1, root, &out);
	CHECK(strcmp(list(&out), "4-7") == 0, "its node's CPUs all held: shared with their holders, %s", list(&out));
	cpuset_shared_on(&avail, &held, -1, root, &out);
	CHECK(strcmp(list(&out), "0-3") == 0, "no home: every free CPU, %s", list(&out));
	cpuset_shared_on(&low, &held, 1, root, &out);
	CHECK(strcmp(list(&out), "0-3") == 0, "a home without CPUs to use: every free CPU, %s", list(&out));

	CHECK(cpuset_node_of(&low, root) == 0, "0-3 are node 0's");
	CHECK(cpuset_node_of(&avail, root) == -1, "0-7 span two nodes");
	CHECK(cpuset_node_of(&low, "/nonexistent") == -1, "no nodes: none");

	held = set_of((const int[]){ 1, 2 }, 2);
	cpuset_shared(&avail, &held, &out);
	CHECK(strcmp(list(&out), "0,3-7") == 0, "the shared pool: what no one holds, %s", list(&out));
	cpuset_shared(&avail, &avail, &out);
	CHECK(strcmp(list(&out), "0-7") == 0, "all held: the pool is every CPU, %s", list(&out));
	CPU_ZERO(&out);
	CHECK(strcmp(list(&out), "") == 0, "an empty set prints as nothing");

	test_child_memory(root);

	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	CHECK(system(cmd) == 0, "scratch sysfs removed");
	return test_summary();
}
