/*
 * Finding and loading the engine's plugins (plugin.h).
 */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "privai/status.h"
#include "plugin.h"

/* Candidate i for `file`: 0 $env, 1 beside the binary, 2 ../lib/privai. */
static int
plugin_path(int i, const char *file, const char *env, char *buf, size_t len)
{
	char exe[PATH_MAX];
	const char *set = getenv(env);
	ssize_t n;
	int w;

	if (i == 0)
		return set != NULL && set[0] != '\0' ? snprintf(buf, len, "%s", set) < (int)len : 0;
	if ((n = readlink("/proc/self/exe", exe, sizeof(exe) - 1)) <= 0)
		return 0;
	exe[n] = '\0';
	char *slash = strrchr(exe, '/');
	if (slash == NULL)
		return 0;
	*slash = '\0';
	if (i == 1)
		w = snprintf(buf, len, "%s/%s", exe, file);
	else if (i == 2)
		w = snprintf(buf, len, "%s/../lib/privai/%s", exe, file);
	else
		return 0;
	return w > 0 && (size_t)w < len;
}

void *
plugin_open(const char *file, const char *env, const char *what, char *err)
{
	char path[PATH_MAX + 64], tried[PRIVAI_ERR_LEN / 2] = "";
	void *h;

	for (int i = 0; i < 3; i++) {
		if (!plugin_path(i, file, env, path, sizeof(path)))
			continue;
		if (access(path, F_OK) != 0) {
			size_t used = strlen(tried);
			snprintf(tried + used, sizeof(tried) - used, "%s%.200s", used ? ", " : "", path);
			if (i == 0)
				break; /* a path named by hand that is not there: say so, do not look elsewhere */
			continue;
		}
		if ((h = dlopen(path, RTLD_NOW | RTLD_LOCAL)) == NULL)
			privai_fail(err, PRIVAI_EUNAVAIL, "%s cannot be loaded: %s", what, dlerror());
		return h;
	}
	privai_fail(err, PRIVAI_EUNAVAIL, "this privai-engine was installed without %s (%s not found: %s)", what, file,
		    tried);
	return NULL;
}
