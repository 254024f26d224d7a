/* The CPU's vendor, family and model, from /proc/cpuinfo. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "cpuid.h"
#include "hostfs.h"

/* A "key\t: value" line's key is `key` (tabs and spaces before the colon
 * vary by field). */
static int
key_is(const char *line, const char *colon, const char *key)
{
	size_t k = (size_t)(colon - line);

	while (k > 0 && isspace((unsigned char)line[k - 1]))
		k--;
	return k == strlen(key) && strncmp(line, key, k) == 0;
}

/* The first value of a numeric field wins: later processors repeat it. */
static void
read_value(const char *colon, int *field)
{
	char *end;
	long v = strtol(colon + 1, &end, 10);

	if (end != colon + 1 && v >= 0 && v <= 4096 && *field < 0)
		*field = (int)v;
}

int
cpu_id_read(const char *root, struct cpu_id *id)
{
	/* read whole once: on a big host it is MiBs, and the first processor is enough */
	char *text = hostfs_read_text(root, "/proc/cpuinfo", HOSTFS_TEXT_MAX, NULL), *line, *save = NULL;
	int flags_seen = 0;

	memset(id, 0, sizeof(*id));
	id->family = id->model = -1;
	if (text == NULL)
		return APP_ENOTFOUND;
	for (line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
		char *colon = strchr(line, ':');
		if (colon == NULL)
			continue;
		if (id->family >= 0 && id->model >= 0 && flags_seen && id->vendor[0])
			break;
		if (key_is(line, colon, "flags") && !flags_seen) {
			const char *p = strstr(colon, " hypervisor");
			flags_seen = 1;
			id->guest = p != NULL && (p[11] == ' ' || p[11] == '\0');
		} else if (key_is(line, colon, "vendor_id") && !id->vendor[0]) {
			const char *v = colon + 1 + strspn(colon + 1, " \t");
			size_t n = strcspn(v, " \t");
			int ok = n > 0 && n < sizeof(id->vendor);
			for (size_t i = 0; ok && i < n; i++)
				ok = isalnum((unsigned char)v[i]);
			if (ok)
				snprintf(id->vendor, sizeof(id->vendor), "%.*s", (int)n, v);
		} else if (key_is(line, colon, "cpu family")) {
			read_value(colon, &id->family);
		} else if (key_is(line, colon, "model")) {
			read_value(colon, &id->model);
		}
	}
	free(text);
	return 0;
}
