/*
 * CPU sets for CPU deployments.  A placement with threads > 0 gets that
 * many CPUs of its own; one with threads 0 shares the CPUs no running
 * deployment holds (Kubernetes' static CPU manager: exclusive CPUs for
 * guaranteed pods, a shared pool for the rest).  The engine then runs its
 * threads on those CPUs only (it counts its default threads from its
 * affinity), so two engines never fight over one core.
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

/* "0-3,8,10-11": the kernel's list format (cpuset(7)). */
void cpuset_format(const cpu_set_t *s, char *out, size_t size);

#endif
