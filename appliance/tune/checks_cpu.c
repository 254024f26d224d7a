/* CPU checks: model, ISA for the engine's kernels, SMT, NUMA, frequency policy. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostfs.h"
#include "tune.h"

#define MAX_CPUS 8192

static int
has_flag(const struct tune_host *h, const char *flag)
{
	const char *p = h->ni.cpu_flags;
	size_t n = strlen(flag);

	while ((p = strstr(p, flag)) != NULL) {
		if ((p == h->ni.cpu_flags || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0'))
			return 1;
		p += n;
	}
	return 0;
}

/* Sapphire Rapids, Emerald Rapids, Granite Rapids (family 6): the Xeons with AMX. */
static int
amx_capable_model(const struct tune_host *h)
{
	static const int models[] = { 143, 207, 173, 174 };

	if (h->cpu_family != 6)
		return 0;
	for (size_t i = 0; i < sizeof(models) / sizeof(models[0]); i++)
		if (h->cpu_model == models[i])
			return 1;
	return 0;
}

static void
check_model(const struct tune_host *h, struct report *r)
{
	const struct node_info *ni = &h->ni;
	struct check *c;

	if (ni->cpu_threads == 0) {
		c = report_add(r, "cpu.model", "CPU model", CHECK_FAIL);
		report_found(c, "/proc/cpuinfo cannot be read or lists no processor");
		report_expected(c, "a readable /proc/cpuinfo");
		report_fix(c, "mount procfs at %s/proc", strcmp(h->root, "/") == 0 ? "" : h->root);
		return;
	}
	if (ni->cpu_model[0] == '\0' || ni->cpu_flags[0] == '\0') {
		c = report_add(r, "cpu.model", "CPU model", CHECK_WARN);
		report_found(c, "/proc/cpuinfo lists %d processor%s but no %s", ni->cpu_threads,
			     ni->cpu_threads == 1 ? "" : "s", ni->cpu_model[0] ? "flags" : "model name");
		report_expected(c, "a model name and flags for every processor");
		report_fix(c, "read /proc/cpuinfo on the host: a container or an emulator may hide the CPU");
		return;
	}
	c = report_add(r, "cpu.model", "CPU model", CHECK_PASS);
	report_found(c, "%s; %d socket%s, %d cores, %d threads", ni->cpu_model, ni->cpu_sockets,
		     ni->cpu_sockets == 1 ? "" : "s", ni->cpu_cores, ni->cpu_threads);
	report_expected(c, "any x86-64 or arm64 server CPU");
}

static void
check_isa(const struct tune_host *h, struct report *r)
{
	struct check *c;

	if (h->ni.cpu_threads == 0) {
		c = report_add(r, "cpu.avx512", "AVX-512", CHECK_SKIP);
		report_found(c, "no CPU flags to read");
	} else if (has_flag(h, "asimd")) {
		c = report_add(r, "cpu.avx512", "AVX-512", CHECK_SKIP);
		report_found(c, "an arm64 CPU: the engine uses its NEON kernels");
	} else if (has_flag(h, "avx512f") && has_flag(h, "avx512bw")) {
		c = report_add(r, "cpu.avx512", "AVX-512", CHECK_PASS);
		report_found(c, "avx512f avx512bw%s%s", has_flag(h, "avx512_vnni") ? " avx512_vnni" : "",
			     has_flag(h, "avx512_bf16") ? " avx512_bf16" : "");
		report_expected(c, "avx512f and avx512bw");
	} else {
		c = report_add(r, "cpu.avx512", "AVX-512", CHECK_WARN);
		report_found(c, "no AVX-512 (%s)", has_flag(h, "avx2") ? "AVX2 only" : "not even AVX2");
		report_expected(c, "avx512f and avx512bw");
		report_fix(c,
			   "CPU inference runs the engine's %s kernels; a Xeon of 3rd gen or later (or, in a VM, "
			   "a VM hardware version that exposes AVX-512) is faster",
			   has_flag(h, "avx2") ? "AVX2" : "scalar");
	}
}

static void
check_amx(const struct tune_host *h, struct report *r)
{
	struct check *c;

	if (has_flag(h, "amx_tile")) {
		c = report_add(r, "cpu.amx", "AMX", CHECK_PASS);
		report_found(c, "amx_tile%s%s", has_flag(h, "amx_bf16") ? " amx_bf16" : "",
			     has_flag(h, "amx_int8") ? " amx_int8" : "");
		report_expected(c, "amx_tile, amx_bf16, amx_int8 on 4th gen Xeon or later");
	} else if (!amx_capable_model(h)) {
		c = report_add(r, "cpu.amx", "AMX", CHECK_SKIP);
		report_found(c, "this CPU has no AMX (4th gen Xeon or later has)");
	} else if (h->kernel_major >= 0 && (h->kernel_major < 5 || (h->kernel_major == 5 && h->kernel_minor < 16))) {
		c = report_add(r, "cpu.amx", "AMX", CHECK_FAIL);
		report_found(c, "a CPU with AMX (family 6 model %d) under kernel %s, which cannot enable AMX state",
			     h->cpu_model, h->ni.kernel);
		report_expected(c, "kernel 5.16 or later (AMX needs its XFD support)");
		report_fix(c, "boot a kernel >= 5.16 (Debian 12 ships 6.1); in a VM, upgrade the guest's kernel");
	} else {
		c = report_add(r, "cpu.amx", "AMX", CHECK_WARN);
		report_found(c, "a CPU with AMX (family 6 model %d) but no amx flags%s", h->cpu_model,
			     h->hypervisor[0] ? ": the hypervisor hides them" : "");
		report_expected(c, "amx_tile, amx_bf16, amx_int8");
		report_fix(c, "%s",
			   h->hypervisor[0]
				   ? "give the VM a hardware version that exposes AMX (ESXi 8: version 20) and "
				     "do not mask the CPU features (EVC)"
				   : "enable AMX in the firmware");
	}
}

static void
check_smt(const struct tune_host *h, struct report *r)
{
	long long active;
	struct check *c;

	if (hostfs_read_long(h->root, "/sys/devices/system/cpu/smt/active", 10, &active) != 0 || active < 0 ||
	    active > 1) {
		c = report_add(r, "cpu.smt", "SMT", CHECK_SKIP);
		report_found(c, "the kernel does not say (/sys/devices/system/cpu/smt/active)");
		return;
	}
	c = report_add(r, "cpu.smt", "SMT", CHECK_PASS);
	report_found(c, "SMT %s: %d threads on %d cores", active ? "on" : "off", h->ni.cpu_threads, h->ni.cpu_cores);
	report_expected(c, "either: the engine runs one thread per physical core and leaves the siblings to the host");
}

static void
check_numa(const struct tune_host *h, struct report *r)
{
	const struct node_info *ni = &h->ni;
	char list[300] = "";
	struct check *c;
	int empty = -1;

	for (int i = 0; i < ni->numa_nodes; i++) {
		size_t n = strlen(list);
		snprintf(list + n, sizeof(list) - n, "%snode%d CPUs %s, %lld GiB", i ? "; " : "", ni->numa[i].id,
			 ni->numa[i].cpulist[0] ? ni->numa[i].cpulist : "none",
			 (long long)(ni->numa[i].memory_bytes > 0 ? ni->numa[i].memory_bytes >> 30 : 0));
		if (ni->numa[i].cpulist[0] && ni->numa[i].memory_bytes <= 0 && empty < 0)
			empty = ni->numa[i].id;
	}
	if (ni->numa_nodes == 0) {
		c = report_add(r, "cpu.numa", "NUMA layout", CHECK_SKIP);
		report_found(c, "/sys/devices/system/node cannot be read");
		return;
	}
	if (empty >= 0) {
		c = report_add(r, "cpu.numa", "NUMA layout", CHECK_WARN);
		report_found(c, "node%d has CPUs but no memory (%s)", empty, list);
		report_expected(c, "memory on every node with CPUs");
		report_fix(c, "populate every socket's memory channels%s",
			   h->hypervisor[0] ? "; in a VM, size vNUMA to the host's nodes" : "");
	} else if (ni->cpu_sockets > ni->numa_nodes) {
		c = report_add(r, "cpu.numa", "NUMA layout", CHECK_WARN);
		report_found(c, "%d sockets but %d NUMA node%s (%s)", ni->cpu_sockets, ni->numa_nodes,
			     ni->numa_nodes == 1 ? "" : "s", list);
		report_expected(c, "at least one NUMA node per socket");
		report_fix(c, "%s",
			   h->hypervisor[0]
				   ? "expose vNUMA to the VM (numa.vcpu.maxPerVirtualNode = cores per socket)"
				   : "turn off node interleaving in the firmware so each socket is its own node");
	} else {
		c = report_add(r, "cpu.numa", "NUMA layout", CHECK_PASS);
		report_found(c, "%d node%s: %s", ni->numa_nodes, ni->numa_nodes == 1 ? "" : "s", list);
		report_expected(c, "one node or more per socket, each with memory");
	}
}

/* How many CPUs have `file` (under cpufreq/) equal to want, of how many
 * report it; the first differing value goes in other. */
static void
count_cpufreq(const struct tune_host *h, const char *file, const char *want, int *match, int *total, char *other,
	      size_t size)
{
	char path[128], val[64], **cpus;
	int n;

	*match = *total = 0;
	other[0] = '\0';
	cpus = hostfs_list(h->root, "/sys/devices/system/cpu", MAX_CPUS + 64, &n);
	for (int i = 0; i < n; i++) {
		if (strncmp(cpus[i], "cpu", 3) != 0 || strspn(cpus[i] + 3, "0123456789") != strlen(cpus[i] + 3) ||
		    cpus[i][3] == '\0')
			continue;
		snprintf(path, sizeof(path), "/sys/devices/system/cpu/%s/cpufreq/%s", cpus[i], file);
		if (hostfs_read_line(h->root, path, val, sizeof(val)) < 0)
			continue;
		(*total)++;
		if (strcmp(val, want) == 0)
			(*match)++;
		else if (other[0] == '\0')
			snprintf(other, size, "%s", val);
	}
	hostfs_free_names(cpus, n);
}

static void
check_governor(const struct tune_host *h, struct report *r)
{
	const char *want = h->profile->governor;
	char other[64];
	struct check *c;
	int match, total;

	count_cpufreq(h, "scaling_governor", want, &match, &total, other, sizeof(other));
	if (total == 0) {
		c = report_add(r, "cpu.governor", "CPU frequency governor", CHECK_SKIP);
		report_found(c, "no cpufreq policy (%s)",
			     h->hypervisor[0] ? "a VM: the host sets the frequency" : "no cpufreq driver loaded");
		return;
	}
	c = report_add(r, "cpu.governor", "CPU frequency governor", match == total ? CHECK_PASS : CHECK_WARN);
	if (match == total)
		report_found(c, "%s on all %d CPUs", want, total);
	else
		report_found(c, "%s on %d of %d CPUs (others: %s)", want, match, total, other);
	report_expected(c, "%s on every CPU", want);
	if (match != total)
		report_fix(c, "privai-tune apply --profile %s (writes scaling_governor)", h->profile->name);
}

static void
check_power(const struct tune_host *h, struct report *r)
{
	const char *want = h->profile->epp;
	char other[64], platform[64];
	struct check *c;
	int match, total, has_platform;

	count_cpufreq(h, "energy_performance_preference", want, &match, &total, other, sizeof(other));
	has_platform =
		hostfs_read_line(h->root, "/sys/firmware/acpi/platform_profile", platform, sizeof(platform)) == 0;
	if (total == 0 && !has_platform) {
		c = report_add(r, "cpu.power_profile", "Power profile", CHECK_SKIP);
		report_found(c, "neither an energy-performance preference nor an ACPI platform profile is exposed%s",
			     h->hypervisor[0] ? " (a VM: set the host's power policy to High Performance)" : "");
		return;
	}
	if (match == total && (!has_platform || strcmp(platform, "performance") == 0)) {
		c = report_add(r, "cpu.power_profile", "Power profile", CHECK_PASS);
		report_found(c, "%s%s%s", total ? "energy_performance_preference performance" : "",
			     total && has_platform ? ", " : "", has_platform ? "platform_profile performance" : "");
	} else {
		c = report_add(r, "cpu.power_profile", "Power profile", CHECK_WARN);
		if (match != total)
			report_found(c, "energy_performance_preference %s on %d of %d CPUs", other, total - match,
				     total);
		else
			report_found(c, "platform_profile %s", platform);
		report_fix(c, "privai-tune apply --profile %s; set the firmware's power profile to Maximum Performance",
			   h->profile->name);
	}
	report_expected(c, "performance");
}

void
checks_cpu(const struct tune_host *h, struct report *r)
{
	check_model(h, r);
	check_isa(h, r);
	check_amx(h, r);
	check_smt(h, r);
	check_numa(h, r);
	check_governor(h, r);
	check_power(h, r);
}
