/*
 * CPU sets for CPU deployments.  A placement with threads > 0 gets that
 * many CPUs of its own; one with threads 0 shares the CPUs no running
 * deployment holds (Kubernetes' static CPU manager: exclusive CPUs for
 * guaranteed pods, a shared pool for the rest).  The engine then runs its
 * threads on those CPUs only (it counts its default threads from its
 * affinity), so two engines never fight over one core.
 *
 * On a host with several NUMA nodes (sockets) a shared engine is given a
 * home node and shares the free CPUs of that node only, its memory bound
 * to it: an engine spread over two sockets reads half its weights
 * through the link between them.  Shared engines go to the node with the
 * fewest of them, then the most free CPUs: one engine a socket.
 */
#ifndef PRIVAI_DEPLOY_CPUSET_H
#define PRIVAI_DEPLOY_CPUSET_H

#include <sched.h>
#include <stddef.h>

/* Where an engine may run: set (empty: anywhere) and the NUMA node its
 * memory should come from (-1: any). */
struct engine_cpus {
	cpu_set_t set;
	int node;
};

/* n CPUs of avail that are not in held, into out: all from one NUMA node
 * when one has n free (sysfs_root: where devices/system/node/ is read,
 * "/sys" on a host), else the lowest free ones; when fewer than n are
 * free (an oversubscribed placement), the free ones and then the lowest
 * held ones.  *node is the NUMA node of all of them, or -1 when they span
 * nodes or the host has one.  Returns how many were chosen (n, or every
 * CPU of avail when it has fewer). */
int cpuset_pick(const cpu_set_t *avail, const cpu_set_t *held, int n, const char *sysfs_root, cpu_set_t *out,
		int *node);

/* The CPUs of avail not in held, or all of avail when every one is held:
 * what a deployment without threads of its own shares. */
void cpuset_shared(const cpu_set_t *avail, const cpu_set_t *held, cpu_set_t *out);

#define CPUSET_MAX_NODES 64 /* node ids below this are read */

/* The home node of a new shared engine where the host under sysfs_root
 * has several nodes: of those with CPUs in avail, the one with the fewest
 * shared engines (sharers[id], indexed by node id), then the most CPUs
 * of avail not in held, then the lowest id.  -1 on a host with one node
 * or none. */
int cpuset_home_node(const cpu_set_t *avail, const cpu_set_t *held, const int sharers[CPUSET_MAX_NODES],
		     const char *sysfs_root);

/* What a shared engine at home on `node` runs on: the CPUs of avail in
 * that node that are not in held, or all of the node's CPUs in avail when
 * others hold every one; with node -1 (or a node without CPUs in avail),
 * cpuset_shared(). */
void cpuset_shared_on(const cpu_set_t *avail, const cpu_set_t *held, int node, const char *sysfs_root, cpu_set_t *out);

/* The node all CPUs of set belong to, or -1 (several, none, one node). */
int cpuset_node_of(const cpu_set_t *set, const char *sysfs_root);

/* "0-3,8,10-11": the kernel's list format (cpuset(7)). */
void cpuset_format(const cpu_set_t *s, char *out, size_t size);

#endif
