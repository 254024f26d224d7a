/*
 * A node's CPU, memory and network counters from procfs (under a root
 * prefix, so tests read a fixture tree), and the rates between two reads.
 */
#ifndef PRIVAI_ADMIN_HOST_STATS_H
#define PRIVAI_ADMIN_HOST_STATS_H

#include <stdint.h>

struct host_counters {
	int ok_cpu, ok_mem, ok_net;
	uint64_t cpu_busy, cpu_total; /* jiffies since boot, every CPU */
	double mem_total, mem_avail;  /* bytes */
	uint64_t rx_bytes, tx_bytes;  /* every interface but loopback */
	double load1;                 /* -1: unknown */
};

/* Read /proc/stat, /proc/meminfo, /proc/net/dev and /proc/loadavg under
 * root; what cannot be read is left not ok. */
void host_counters_read(const char *root, struct host_counters *c);

/* Busy share of CPU time between the two reads, 0..100; NAN when either
 * lacks it or no time passed. */
double host_cpu_pct(const struct host_counters *now, const struct host_counters *before);

#endif
