/*
 * The CPU's identity from the first processor of /proc/cpuinfo: vendor,
 * family, model, and whether it runs as a guest (every guest's flags
 * carry "hypervisor").  NCCL's topology wants the first three, privai-tune
 * all four.
 */
#ifndef PRIVAI_CPUID_H
#define PRIVAI_CPUID_H

struct cpu_id {
	char vendor[16];   /* "GenuineIntel", "AuthenticAMD"; "" unknown */
	int family, model; /* -1 unknown */
	int guest;
};

/* Read under root; fields stay unknown when cpuinfo is missing or garbage.
 * 0, or an APP_E* code when /proc/cpuinfo cannot be read at all. */
int cpu_id_read(const char *root, struct cpu_id *id);

#endif
