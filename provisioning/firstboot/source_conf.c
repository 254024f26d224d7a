/* Source 1: /etc/privai/appliance.conf, KEY=VALUE lines shipped in the image. */
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "firstboot.h"
#include "hostfs.h"

#define CONF_MAX (256 << 10)

int
fb_read_conf(struct fb_config *c, const char *root, const char *path)
{
	char source[64], *text, *line, *save = NULL;
	int seen[FB_NKEYS] = { 0 }, lineno = 0;

	if (!hostfs_exists(root, path))
		return 0;
	if ((text = hostfs_read_text(root, path, CONF_MAX, NULL)) == NULL) {
		fb_warn(c, "%s cannot be read (or is larger than %d KiB); its defaults are not used", path,
			CONF_MAX >> 10);
		return -1;
	}
	snprintf(source, sizeof(source), "%s", path);
	for (line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
		lineno++;
		line[strcspn(line, "\r")] = '\0';
		while (*line == ' ' || *line == '\t')
			line++;
		if (*line == '\0' || *line == '#')
			continue;
		char *eq = strchr(line, '=');
		if (eq == NULL) {
			fb_warn(c, "%s:%d: not KEY=VALUE; ignored", path, lineno);
			continue;
		}
		*eq = '\0';
		int k = fb_key_find(line);
		if (k < 0) {
			fb_warn(c, "%s:%d: unknown key '%.64s'; ignored", path, lineno, line);
			continue;
		}
		if (seen[k]) {
			fb_warn(c, "%s:%d: %s given twice (first on line %d); the first is kept", path, lineno, line,
				seen[k]);
			continue;
		}
		seen[k] = lineno;
		fb_config_set(c, (enum fb_key)k, eq + 1, source);
	}
	sodium_memzero(text, strlen(text)); /* an admin password may be in it */
	free(text);
	return 0;
}
