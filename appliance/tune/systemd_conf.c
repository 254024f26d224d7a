/* systemd's manager configuration with its drop-ins, read as systemd reads it. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "strfmt.h"
#include "hostfs.h"
#include "systemd_conf.h"

#define MAX_DROPINS 256

static char *
trim(char *s)
{
	char *e;

	while (isspace((unsigned char)*s))
		s++;
	e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = '\0';
	return s;
}

/* Apply one file's assignments of section.key to value. */
static void
scan_file(const char *root, const char *path, const char *section, const char *key, char *value, size_t vsize,
	  char *where, size_t wsize)
{
	char *text = hostfs_read_text(root, path, 1 << 20, NULL), *line, *save = NULL;
	int in_section = 0;

	if (text == NULL)
		return;
	for (line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
		char *l = trim(line), *eq;
		if (*l == '#' || *l == ';' || *l == '\0')
			continue;
		if (*l == '[') {
			char *end = strchr(l, ']');
			in_section = end != NULL && (size_t)(end - l - 1) == strlen(section) &&
				     strncmp(l + 1, section, strlen(section)) == 0;
			continue;
		}
		if (!in_section || (eq = strchr(l, '=')) == NULL)
			continue;
		*eq = '\0';
		if (strcmp(trim(l), key) == 0) {
			snprintf(value, vsize, "%s", trim(eq + 1));
			snprintf(where, wsize, "%s", path);
		}
	}
	free(text);
}

void
systemd_conf_get(const char *root, const char *name, const char *section, const char *key, char *value, size_t vsize,
		 char *where, size_t wsize)
{
	static const char *const dirs[] = { "/usr/lib/systemd", "/run/systemd", "/etc/systemd" };
	char path[512], *chosen[MAX_DROPINS];
	int n_chosen = 0;

	value[0] = where[0] = '\0';
	if (str_fmt(path, sizeof(path), "/etc/systemd/%s", name) != APP_OK)
		return; /* names are ours ("system.conf"), never this long */
	scan_file(root, path, section, key, value, vsize, where, wsize);
	/* each drop-in name once, from the last directory that has it */
	for (int d = 0; d < 3; d++) {
		char dir[256], **names;
		int n;
		names = str_fmt(dir, sizeof(dir), "%s/%s.d", dirs[d], name) == APP_OK
				? hostfs_list(root, dir, MAX_DROPINS, &n)
				: (n = 0, NULL);
		for (int i = 0; i < n; i++) {
			size_t l = strlen(names[i]);
			int k;
			if (l < 6 || strcmp(names[i] + l - 5, ".conf") != 0)
				continue;
			for (k = 0; k < n_chosen; k++)
				if (strcmp(strrchr(chosen[k], '/') + 1, names[i]) == 0)
					break;
			if (str_fmt(path, sizeof(path), "%s/%s", dir, names[i]) != APP_OK)
				continue; /* a drop-in whose name is too long is not one systemd reads either */
			if (k < n_chosen) {
				char *p = strdup(path);
				if (p != NULL) {
					free(chosen[k]);
					chosen[k] = p;
				}
			} else if (n_chosen < MAX_DROPINS && (chosen[n_chosen] = strdup(path)) != NULL) {
				n_chosen++;
			}
		}
		hostfs_free_names(names, n);
	}
	/* in file-name order, whichever directory each came from */
	for (int i = 1; i < n_chosen; i++)
		for (int j = i; j > 0 && strcmp(strrchr(chosen[j - 1], '/'), strrchr(chosen[j], '/')) > 0; j--) {
			char *t = chosen[j];
			chosen[j] = chosen[j - 1];
			chosen[j - 1] = t;
		}
	for (int i = 0; i < n_chosen; i++) {
		scan_file(root, chosen[i], section, key, value, vsize, where, wsize);
		free(chosen[i]);
	}
}
