/* This node's CPUs, NUMA layout, memory and NICs, from /proc and /sys. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "status.h"
#include "strfmt.h"
#include "hostfs.h"
#include "node_info.h"

#define MAX_CPUS 4096

/* CPU flags worth showing: what the engine's kernels can use. */
static const char *const wanted_flags[] = { "avx2",        "fma",         "f16c",        "avx512f",  "avx512bw",
					    "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16",
					    "amx_int8",    "asimd",       "sve",         "sve2",     "i8mm",
					    "bf16",        NULL };

static void
missing(struct node_info *ni, const char *what)
{
	size_t n = strlen(ni->missing);

	if (n + strlen(what) + 2 < sizeof(ni->missing))
		snprintf(ni->missing + n, sizeof(ni->missing) - n, "%s%s", n ? " " : "", what);
}

static FILE *
open_under(const char *root, const char *path)
{
	char full[PATH_MAX];

	return hostfs_path(root, path, full, sizeof(full)) < 0 ? NULL : fopen(full, "r");
}

static int
read_line(const char *root, const char *path, char *out, size_t size)
{
	return hostfs_read_line(root, path, out, size);
}

/* A decimal integer file; def when missing or not a number. */
static long long
read_int(const char *root, const char *path, long long def)
{
	long long v;

	return hostfs_read_long(root, path, 10, &v) == 0 ? v : def;
}

static void
keep_flags(struct node_info *ni, const char *list)
{
	char tok[64];
	const char *p = list;
	size_t n;

	ni->cpu_flags[0] = '\0';
	for (int i = 0; wanted_flags[i] != NULL; i++) {
		for (p = list; *p != '\0'; p += n) {
			p += strspn(p, " \t");
			n = strcspn(p, " \t");
			if (n == 0 || n >= sizeof(tok))
				continue;
			memcpy(tok, p, n);
			tok[n] = '\0';
			if (strcmp(tok, wanted_flags[i]) == 0) {
				size_t len = strlen(ni->cpu_flags);
				snprintf(ni->cpu_flags + len, sizeof(ni->cpu_flags) - len, "%s%s", len ? " " : "", tok);
				break;
			}
		}
	}
}

/* "key\t: value" lines; value after the colon, trimmed, or NULL. */
static const char *
cpuinfo_value(char *line, const char *key)
{
	size_t k = strlen(key);
	char *v;

	if (strncmp(line, key, k) != 0 || (line[k] != ' ' && line[k] != '\t' && line[k] != ':'))
		return NULL;
	if ((v = strchr(line + k, ':')) == NULL)
		return NULL;
	v += 1 + strspn(v + 1, " \t");
	v[strcspn(v, "\n")] = '\0';
	return v;
}

/* A topology id (physical id, core id): 0..65535, or -1 for anything
 * else, so that a bad line is skipped rather than overflowing a key. */
static int
topology_id(const char *v)
{
	char *end;
	long n;

	errno = 0;
	n = strtol(v, &end, 10);
	if (errno != 0 || end == v || n < 0 || n > 65535)
		return -1;
	return (int)n;
}

static void
read_cpuinfo(const char *root, struct node_info *ni)
{
	static _Thread_local long long core_key[MAX_CPUS];
	static _Thread_local int socket_seen[256];
	char line[8192];
	int phys = -1, n_keys = 0;
	const char *v;
	FILE *fp = open_under(root, "/proc/cpuinfo");

	if (fp == NULL) {
		missing(ni, "/proc/cpuinfo");
		return;
	}
	memset(socket_seen, 0, sizeof(socket_seen));
	while (fgets(line, sizeof(line), fp) != NULL) {
		if (cpuinfo_value(line, "processor") != NULL)
			ni->cpu_threads++;
		else if ((v = cpuinfo_value(line, "model name")) != NULL && ni->cpu_model[0] == '\0')
			snprintf(ni->cpu_model, sizeof(ni->cpu_model), "%s", v);
		else if ((v = cpuinfo_value(line, "physical id")) != NULL) {
			phys = topology_id(v);
			if (phys >= 0 && phys < 256 && !socket_seen[phys]++)
				ni->cpu_sockets++;
		} else if ((v = cpuinfo_value(line, "core id")) != NULL && phys >= 0 && topology_id(v) >= 0 &&
			   n_keys < MAX_CPUS) {
			long long key = (long long)phys * 65536 + topology_id(v);
			int seen = 0;
			for (int i = 0; i < n_keys && !seen; i++)
				seen = core_key[i] == key;
			if (!seen) {
				core_key[n_keys++] = key;
				ni->cpu_cores++;
			}
		} else if ((v = cpuinfo_value(line, "flags")) != NULL ||
			   (v = cpuinfo_value(line, "Features")) != NULL) {
			if (ni->cpu_flags[0] == '\0')
				keep_flags(ni, v);
		}
	}
	fclose(fp);
	/* no topology lines (some VMs, ARM): count each thread as a core */
	if (ni->cpu_sockets == 0 && ni->cpu_threads > 0)
		ni->cpu_sockets = 1;
	if (ni->cpu_cores == 0)
		ni->cpu_cores = ni->cpu_threads;
	if (ni->cpu_threads == 0)
		missing(ni, "/proc/cpuinfo(processor)");
}

/* "MemTotal:  263856 kB" (also the per-node "Node 0 MemTotal:" form). */
static int64_t
meminfo_total(const char *root, const char *path)
{
	char line[256];
	long long kb = -1;
	FILE *fp = open_under(root, path);

	if (fp == NULL)
		return APP_ENOTFOUND;
	while (kb < 0 && fgets(line, sizeof(line), fp) != NULL) {
		char *p = strstr(line, "MemTotal:");
		char *end;
		if (p == NULL)
			continue;
		long long v = strtoll(p + 9, &end, 10);
		if (end != p + 9 && v >= 0 && v < (1LL << 42))
			kb = v;
	}
	fclose(fp);
	return kb < 0 ? APP_ENOTFOUND : kb * 1024;
}

static int
cmp_numa(const void *a, const void *b)
{
	return ((const struct node_numa *)a)->id - ((const struct node_numa *)b)->id;
}

static void
read_numa(const char *root, struct node_info *ni)
{
	char dir[PATH_MAX], path[PATH_MAX + 300];
	struct dirent *e;
	DIR *d;

	if (hostfs_path(root, "/sys/devices/system/node", dir, sizeof(dir)) != APP_OK || (d = opendir(dir)) == NULL) {
		missing(ni, "/sys/devices/system/node");
		return;
	}
	while ((e = readdir(d)) != NULL && ni->numa_nodes < NODE_MAX_NUMA) {
		char *end;
		long id;
		if (strncmp(e->d_name, "node", 4) != 0)
			continue;
		id = strtol(e->d_name + 4, &end, 10);
		if (end == e->d_name + 4 || *end != '\0' || id < 0 || id > 1023)
			continue;
		struct node_numa *n = &ni->numa[ni->numa_nodes++];
		n->id = (int)id;
		if (str_fmt(path, sizeof(path), "/sys/devices/system/node/%s/cpulist", e->d_name) == APP_OK)
			read_line(root, path, n->cpulist, sizeof(n->cpulist));
		if (str_fmt(path, sizeof(path), "/sys/devices/system/node/%s/meminfo", e->d_name) == APP_OK)
			n->memory_bytes = meminfo_total(root, path);
	}
	closedir(d);
	qsort(ni->numa, (size_t)ni->numa_nodes, sizeof(ni->numa[0]), cmp_numa);
}

static int
cmp_nic(const void *a, const void *b)
{
	return strcmp(((const struct node_nic *)a)->name, ((const struct node_nic *)b)->name);
}

static void
read_nics(const char *root, struct node_info *ni)
{
	char dir[PATH_MAX], path[PATH_MAX + 300];
	struct dirent *e;
	struct stat st;
	DIR *d;

	if (hostfs_path(root, "/sys/class/net", dir, sizeof(dir)) != APP_OK || (d = opendir(dir)) == NULL) {
		missing(ni, "/sys/class/net");
		return;
	}
	while ((e = readdir(d)) != NULL && ni->n_nics < NODE_MAX_NICS) {
		if (e->d_name[0] == '.' || strcmp(e->d_name, "lo") == 0 ||
		    strlen(e->d_name) >= sizeof(ni->nics[0].name))
			continue;
		struct node_nic *n = &ni->nics[ni->n_nics++];
		memcpy(n->name, e->d_name, strlen(e->d_name) + 1); /* its length was checked above */
		if (str_fmt(path, sizeof(path), "/sys/class/net/%s/address", e->d_name) == APP_OK)
			read_line(root, path, n->mac, sizeof(n->mac));
		if (str_fmt(path, sizeof(path), "/sys/class/net/%s/operstate", e->d_name) == APP_OK)
			read_line(root, path, n->operstate, sizeof(n->operstate));
		if (str_fmt(path, sizeof(path), "/sys/class/net/%s/speed", e->d_name) == APP_OK)
			n->speed_mbps = (int)read_int(root, path, -1);
		if (n->speed_mbps < -1 || n->speed_mbps > 10000000)
			n->speed_mbps = -1;
		if (str_fmt(path, sizeof(path), "/sys/class/net/%s/mtu", e->d_name) == APP_OK)
			n->mtu = (int)read_int(root, path, 0);
		if (str_fmt(path, sizeof(path), "/sys/class/net/%s/device/numa_node", e->d_name) == APP_OK)
			n->numa_node = (int)read_int(root, path, -1);
		if (str_fmt(path, sizeof(path), "%s/%s/device", dir, e->d_name) == APP_OK)
			n->physical = stat(path, &st) == 0;
	}
	closedir(d);
	qsort(ni->nics, (size_t)ni->n_nics, sizeof(ni->nics[0]), cmp_nic);
}

void
node_info_read(const char *root, struct node_info *ni)
{
	memset(ni, 0, sizeof(*ni));
	if (root == NULL || *root == '\0')
		root = "/";
	if (read_line(root, "/proc/sys/kernel/hostname", ni->hostname, sizeof(ni->hostname)) < 0)
		missing(ni, "/proc/sys/kernel/hostname");
	if (read_line(root, "/proc/sys/kernel/osrelease", ni->kernel, sizeof(ni->kernel)) < 0)
		missing(ni, "/proc/sys/kernel/osrelease");
	read_cpuinfo(root, ni);
	if ((ni->memory_bytes = meminfo_total(root, "/proc/meminfo")) < 0) {
		ni->memory_bytes = 0;
		missing(ni, "/proc/meminfo");
	}
	read_numa(root, ni);
	read_nics(root, ni);
}

cJSON *
node_info_json(const struct node_info *ni)
{
	cJSON *o = cJSON_CreateObject(), *cpu, *numa, *nics;

	if (o == NULL)
		return NULL;
	cJSON_AddStringToObject(o, "hostname", ni->hostname);
	cJSON_AddStringToObject(o, "kernel", ni->kernel);
	cpu = cJSON_AddObjectToObject(o, "cpu");
	if (cpu != NULL) {
		cJSON_AddStringToObject(cpu, "model", ni->cpu_model);
		cJSON_AddNumberToObject(cpu, "sockets", ni->cpu_sockets);
		cJSON_AddNumberToObject(cpu, "cores", ni->cpu_cores);
		cJSON_AddNumberToObject(cpu, "threads", ni->cpu_threads);
		cJSON_AddStringToObject(cpu, "flags", ni->cpu_flags);
		cJSON_AddBoolToObject(cpu, "avx512", strstr(ni->cpu_flags, "avx512f") != NULL);
		cJSON_AddBoolToObject(cpu, "amx", strstr(ni->cpu_flags, "amx_tile") != NULL);
	}
	cJSON_AddNumberToObject(o, "memory_bytes", (double)ni->memory_bytes);
	if ((numa = cJSON_AddArrayToObject(o, "numa")) != NULL)
		for (int i = 0; i < ni->numa_nodes; i++) {
			cJSON *n = cJSON_CreateObject();
			cJSON_AddNumberToObject(n, "id", ni->numa[i].id);
			cJSON_AddStringToObject(n, "cpus", ni->numa[i].cpulist);
			cJSON_AddNumberToObject(n, "memory_bytes",
						(double)(ni->numa[i].memory_bytes > 0 ? ni->numa[i].memory_bytes : 0));
			cJSON_AddItemToArray(numa, n);
		}
	if ((nics = cJSON_AddArrayToObject(o, "nics")) != NULL)
		for (int i = 0; i < ni->n_nics; i++) {
			const struct node_nic *c = &ni->nics[i];
			cJSON *n = cJSON_CreateObject();
			cJSON_AddStringToObject(n, "name", c->name);
			cJSON_AddStringToObject(n, "mac", c->mac);
			cJSON_AddStringToObject(n, "state", c->operstate);
			cJSON_AddNumberToObject(n, "speed_mbps", c->speed_mbps);
			cJSON_AddNumberToObject(n, "mtu", c->mtu);
			cJSON_AddNumberToObject(n, "numa_node", c->numa_node);
			cJSON_AddBoolToObject(n, "physical", c->physical);
			cJSON_AddItemToArray(nics, n);
		}
	cJSON_AddStringToObject(o, "missing", ni->missing);
	return o;
}
