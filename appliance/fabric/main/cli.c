/* Options and output shared by privai-fabric's commands. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "status.h"
#include "strfmt.h"
#include "fabric_cmd.h"

#define DEFAULT_CONFIG "/etc/privai/fabric.conf"

int
fabric_opts_parse(struct fabric_opts *o, int *argc, char **argv, char *err, size_t errsize)
{
	const char *config = getenv("PRIVAI_FABRIC_CONFIG");
	int out = 1;

	memset(o, 0, sizeof(*o));
	o->root = getenv("PRIVAI_FABRIC_ROOT");
	for (int i = 1; i < *argc; i++) {
		if ((strcmp(argv[i], "--root") == 0 || strcmp(argv[i], "--config") == 0) && i + 1 >= *argc) {
			snprintf(err, errsize, "%s needs a value", argv[i]);
			return APP_EINVAL;
		}
		if (strcmp(argv[i], "--root") == 0)
			o->root = argv[++i];
		else if (strcmp(argv[i], "--config") == 0)
			config = argv[++i];
		else
			argv[out++] = argv[i];
	}
	*argc = out;
	argv[out] = NULL;
	if (o->root == NULL || o->root[0] == '\0')
		o->root = "/";
	if (o->root[0] != '/') {
		snprintf(err, errsize, "--root must be an absolute path, not '%s'", o->root);
		return APP_EINVAL;
	}
	if (config != NULL || access(DEFAULT_CONFIG, F_OK) == 0)
		if (fabric_settings_file(config != NULL ? config : DEFAULT_CONFIG, err, errsize) < 0)
			return APP_EINVAL;
	return fabric_settings_load(&o->s, err, errsize);
}

int
fabric_live(const struct fabric_opts *o)
{
	return strcmp(o->root, "/") == 0;
}

int
fabric_abs_path(const char *path, char *out, size_t size)
{
	char cwd[4096];

	if (path[0] == '/')
		return str_fmt(out, size, "%s", path);
	if (getcwd(cwd, sizeof(cwd)) == NULL)
		return APP_ERANGE;
	return str_fmt(out, size, "%s/%s", cwd, path);
}

int
fabric_usage_error(const char *cmd, const char *arg)
{
	fprintf(stderr, "privai-fabric %s: unexpected '%s' (see --help)\n", cmd, arg);
	return 2;
}

int
fabric_fail(const char *what, const char *err)
{
	fprintf(stderr, "privai-fabric %s: %s\n", what, err);
	return 2;
}

void
fabric_print_json(const cJSON *j)
{
	char *s = cJSON_Print(j);

	if (s == NULL) {
		fprintf(stderr, "privai-fabric: out of memory\n");
		return;
	}
	printf("%s\n", s);
	free(s);
}
