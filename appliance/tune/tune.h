/*
 * What privai-tune knows about the host it checks: read once under the
 * root prefix, then handed to each group of checks.
 */
#ifndef PRIVAI_TUNE_H
#define PRIVAI_TUNE_H

#include <stddef.h>

#include "node_info.h"
#include "profile.h"
#include "report.h"
#include "topo.h"

struct tune_host {
	const char *root;
	const struct profile *profile;
	struct node_info ni;
	struct topo topo;
	int cpu_family, cpu_model;      /* -1 unknown */
	int kernel_major, kernel_minor; /* -1 unknown */
	char hypervisor[96];            /* "" on bare metal */
	char driver_version[32];        /* the NVIDIA kernel module's; "" none */
};

/* Read the host; profile NULL picks the default for it.  0, or an APP_E* code with err. */
int tune_host_read(const char *root, const char *profile, struct tune_host *h, char *err, size_t errsize);
void tune_host_free(struct tune_host *h);

/* Whether a process with this comm (as /proc/PID/comm shows it, at most
 * 15 characters) runs on the host. */
int tune_process_running(const struct tune_host *h, const char *comm);

/* The groups of checks, in report order. */
void checks_cpu(const struct tune_host *h, struct report *r);
void checks_memory(const struct tune_host *h, struct report *r);
void checks_gpu(const struct tune_host *h, struct report *r);
void checks_pcie(const struct tune_host *h, struct report *r);
void checks_vm(const struct tune_host *h, struct report *r);

/* "always [madvise] never" -> "madvise"; APP_ENOTFOUND when nothing is chosen. */
int thp_selected(const char *line, char *out, size_t size);

/* Every check, in order. */
void tune_check(const struct tune_host *h, struct report *r);

#endif
