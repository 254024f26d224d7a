/* Fabric Manager's configuration file. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "fm_config.h"
#include "hostfs.h"

#define FM_CONFIG_MAX (1 << 20)
#define N_MANAGED 10

struct managed {
	const char *key;
	char value[256];
	int seen;
};

static void
managed_values(const struct fabric_settings *s, struct managed m[N_MANAGED])
{
	static const char *const keys[N_MANAGED] = {
		"FABRIC_MODE",
		"LOG_LEVEL",
		"LOG_FILE_NAME",
		"LOG_USE_SYSLOG",
		"BIND_INTERFACE_IP",
		"ACCESS_LINK_FAILURE_MODE",
		"TRUNK_LINK_FAILURE_MODE",
		"NVSWITCH_FAILURE_MODE",
		"FM_STAY_RESIDENT_ON_FAILURES",
		"ABORT_CUDA_JOBS_ON_FM_EXIT",
	};
	const int nums[N_MANAGED] = { s->mode,
				      s->log_level,
				      0,
				      s->log_syslog,
				      0,
				      s->access_link_failure_mode,
				      s->trunk_link_failure_mode,
				      s->nvswitch_failure_mode,
				      s->stay_resident,
				      s->abort_cuda_jobs };

	for (int i = 0; i < N_MANAGED; i++) {
		m[i].key = keys[i];
		m[i].seen = 0;
		snprintf(m[i].value, sizeof(m[i].value), "%d", nums[i]);
	}
	snprintf(m[2].value, sizeof(m[2].value), "%s", s->log_file);
	snprintf(m[4].value, sizeof(m[4].value), "%s", s->bind_address);
}

/* The key of a "KEY=VALUE" line: upper case, digits and '_'. */
static size_t
key_length(const char *line, size_t n)
{
	size_t k = 0;

	while (k < n && (isupper((unsigned char)line[k]) || isdigit((unsigned char)line[k]) || line[k] == '_'))
		k++;
	return k > 0 && k < n && line[k] == '=' ? k : 0;
}

char *
fm_config_merge(const char *old, size_t len, const struct fabric_settings *s, int *changed, char *err, size_t errsize)
{
	struct managed m[N_MANAGED];
	char *text = NULL;
	size_t size = 0;
	FILE *out;
	int line = 0;

	*changed = 0;
	if (len > FM_CONFIG_MAX || memchr(old, '\0', len) != NULL) {
		snprintf(err, errsize, "not a Fabric Manager config: %s",
			 len > FM_CONFIG_MAX ? "over 1 MiB" : "binary");
		return NULL;
	}
	managed_values(s, m);
	if ((out = open_memstream(&text, &size)) == NULL) {
		snprintf(err, errsize, "out of memory");
		return NULL;
	}
	for (const char *p = old; p < old + len;) {
		const char *nl = memchr(p, '\n', (size_t)(old + len - p));
		size_t n = nl ? (size_t)(nl - p) : (size_t)(old + len - p), k;
		int done = 0;
		line++;
		if (n > 0 && p[n - 1] == '\r')
			n--;
		k = key_length(p, n);
		if (k == 0 && n > 0 && p[0] != '#' && strspn(p, " \t") < n) {
			fclose(out);
			free(text);
			snprintf(err, errsize,
				 "line %d is neither a comment nor KEY=VALUE: not a Fabric Manager config, "
				 "left as it is",
				 line);
			return NULL;
		}
		for (int i = 0; k > 0 && i < N_MANAGED && !done; i++) {
			if (strlen(m[i].key) != k || strncmp(p, m[i].key, k) != 0)
				continue;
			if (m[i].seen) {
				done = 1; /* a repeated key: the first one is ours, drop the rest */
				(*changed)++;
				break;
			}
			m[i].seen = done = 1;
			if (n - k - 1 != strlen(m[i].value) || strncmp(p + k + 1, m[i].value, n - k - 1) != 0)
				(*changed)++;
			fprintf(out, "%s=%s\n", m[i].key, m[i].value);
		}
		if (!done)
			fprintf(out, "%.*s\n", (int)n, p);
		p = nl ? nl + 1 : old + len;
	}
	for (int i = 0; i < N_MANAGED; i++)
		if (!m[i].seen) {
			fprintf(out, "%s=%s\n", m[i].key, m[i].value);
			(*changed)++;
		}
	if (fclose(out) != 0) {
		free(text);
		snprintf(err, errsize, "out of memory");
		return NULL;
	}
	return text;
}

int
fm_config_apply(const char *root, const struct fabric_settings *s, int dry_run, int *changed, char *err, size_t errsize)
{
	char backup[300], *old, *merged;
	size_t len;
	int rc = 0;

	*changed = 0;
	if ((old = hostfs_read_text(root, s->fm_config, FM_CONFIG_MAX + 1, &len)) == NULL) {
		int e = errno ? errno : EIO;
		snprintf(err, errsize, "%s: %s%s", s->fm_config, strerror(e),
			 e == ENOENT ? " (is nvidia-fabricmanager installed?)" : "");
		return APP_EIO;
	}
	if ((merged = fm_config_merge(old, len, s, changed, err, errsize)) == NULL) {
		free(old);
		return APP_EIO;
	}
	if (!dry_run && *changed > 0) {
		snprintf(backup, sizeof(backup), "%s.privai-orig", s->fm_config);
		if (!hostfs_exists(root, backup) && hostfs_write(root, backup, old, len, 1) < 0) {
			snprintf(err, errsize, "%s: %s", backup, strerror(errno));
			rc = APP_EIO;
		} else if (hostfs_write(root, s->fm_config, merged, strlen(merged), 1) < 0) {
			snprintf(err, errsize, "%s: %s", s->fm_config, strerror(errno));
			rc = APP_EIO;
		}
	}
	free(old);
	free(merged);
	return rc;
}

int
fm_config_get(const char *root, const char *path, const char *key, char *out, size_t size)
{
	size_t len, klen = strlen(key);
	char *text = hostfs_read_text(root, path, FM_CONFIG_MAX, &len), *line, *save = NULL;
	int rc = APP_ENOTFOUND;

	if (text == NULL)
		return APP_ENOTFOUND;
	for (line = strtok_r(text, "\n", &save); line != NULL && rc < 0; line = strtok_r(NULL, "\n", &save))
		if (strncmp(line, key, klen) == 0 && line[klen] == '=') {
			snprintf(out, size, "%.*s", (int)strcspn(line + klen + 1, "\r"), line + klen + 1);
			rc = 0;
		}
	free(text);
	return rc;
}
