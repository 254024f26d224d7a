/*
 * libFuzzer harness for what the appliance reads from /proc and /sys
 * (appliance/lib: node_info.c, pci.c, hostfs.c) and the preflight report
 * privai-tune writes (host_health.c): any file contents must give a
 * reading or a named problem, never a crash.  The input is split at
 * 0xff bytes into the files below, written under a scratch root, which
 * the readers take as their root (as tests do with recorded hosts).
 */
#include <errno.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cluster/host_health.h"
#include "node_info.h"
#include "pci.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define DEV "/sys/devices/pci0000:00/0000:00:01.0"

static const char *const files[] = {
	"/proc/cpuinfo",
	"/proc/meminfo",
	"/sys/devices/system/node/node0/cpulist",
	"/sys/devices/system/node/node0/meminfo",
	"/sys/class/net/eth0/address",
	"/sys/class/net/eth0/speed",
	DEV "/vendor",
	DEV "/device",
	DEV "/class",
	DEV "/numa_node",
	DEV "/current_link_speed",
	DEV "/max_link_width",
	DEV "/config",
	"/run/privai/preflight.json",
	DEV "/resource", /* last: the corpus's older inputs keep their split */
};
#define N_FILES (sizeof(files) / sizeof(files[0]))

static char root[64];

static void
mkdirs(const char *path)
{
	char p[512];

	snprintf(p, sizeof(p), "%s", path);
	for (char *s = p + 1; *s; s++)
		if (*s == '/') {
			*s = '\0';
			if (mkdir(p, 0700) != 0 && errno != EEXIST)
				abort();
			*s = '/';
		}
}

static int
remove_entry(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	return flag == FTW_DP ? rmdir(p) : unlink(p);
}

/* libFuzzer ends with exit(): the fixture tree goes then */
static void
remove_root(void)
{
	(void)nftw(root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char p[512];

	snprintf(root, sizeof(root), "/tmp/privai-fuzz-sysfs-XXXXXX");
	if (mkdtemp(root) == NULL)
		abort();
	atexit(remove_root);
	for (size_t i = 0; i < N_FILES; i++) {
		snprintf(p, sizeof(p), "%s%s", root, files[i]);
		mkdirs(p);
	}
	snprintf(p, sizeof(p), "%s/sys/bus/pci/devices/", root);
	mkdirs(p);
	snprintf(p, sizeof(p), "%s/sys/bus/pci/devices/0000:00:01.0", root);
	if (symlink("../../../devices/pci0000:00/0000:00:01.0", p) != 0 && errno != EEXIST)
		abort();
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char p[512];
	size_t at = 0;

	for (size_t i = 0; i < N_FILES; i++) {
		size_t end = at;
		while (end < size && data[end] != 0xff)
			end++;
		snprintf(p, sizeof(p), "%s%s", root, files[i]);
		FILE *f = fopen(p, "w");
		if (f == NULL)
			abort();
		if (end > at)
			fwrite(data + at, 1, end - at, f);
		fclose(f);
		at = end < size ? end + 1 : size;
	}
	struct node_info ni;
	node_info_read(root, &ni);
	cJSON_Delete(node_info_json(&ni));
	struct pci_bus bus;
	char err[256];
	if (pci_scan(root, &bus, err, sizeof(err)) == 0)
		pci_free(&bus);
	snprintf(p, sizeof(p), "%s/run/privai/preflight.json", root);
	cJSON *pre = host_preflight_read(p);
	if (pre != NULL) {
		cJSON_Delete(host_health_clean(pre));
		cJSON_Delete(pre);
	}
	return 0;
}
