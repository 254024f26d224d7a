/*
 * privai-fabric nccl-env: the NCCL environment of this node's engine
 * ranks (nccl_env.h), shown, written, or kept current by serve.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fabric.h"
#include "fabric_cmd.h"
#include "hostfs.h"
#include "nccl_env.h"
#include "status.h"

int
fabric_nccl_env_sync(const struct fabric_opts *o, const struct fabric *f, cJSON **ret_status)
{
	struct nccl_env e;
	char *text, *old;
	int changed = 0, rc = 0;
	const char *state;

	nccl_env_build(f, o->s.nccl_topo_file, &e);
	if ((text = nccl_env_render(&e)) == NULL)
		return APP_ENOMEM;
	old = hostfs_read_text(o->root, o->s.nccl_env_file, 1 << 20, NULL);
	if (old != NULL && strncmp(old, NCCL_ENV_HEADER, strlen(NCCL_ENV_HEADER)) != 0) {
		state = "hand-edited"; /* its first line is gone: the operator's file, left alone */
	} else if (hostfs_install(o->root, o->s.nccl_env_file, text, strlen(text), 0644, &changed) < 0) {
		state = "error";
		rc = APP_EIO;
	} else {
		state = changed ? "written" : "current";
	}
	if (ret_status != NULL) {
		cJSON *j = cJSON_CreateObject();
		cJSON_AddStringToObject(j, "path", o->s.nccl_env_file);
		cJSON_AddStringToObject(j, "state", state);
		if (rc < 0)
			cJSON_AddStringToObject(j, "error", strerror(errno ? errno : EIO));
		cJSON_AddItemToObject(j, "settings", nccl_env_json(&e));
		*ret_status = j;
	}
	free(old);
	free(text);
	return rc;
}

int
cmd_nccl_env(struct fabric_opts *o, int argc, char **argv)
{
	const char *write = NULL;
	struct fabric f;
	struct nccl_env e;
	char err[256], *text;
	int json = 0, rc = 0;

	for (int i = 0; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0)
			json = 1;
		else if (strcmp(argv[i], "--write") == 0 && i + 1 < argc)
			write = argv[++i];
		else
			return fabric_usage_error("nccl-env", argv[i]);
	}
	if (fabric_read(o->root, fabric_live(o), &f, err, sizeof(err)) < 0)
		return fabric_fail("nccl-env", err);
	nccl_env_build(&f, o->s.nccl_topo_file, &e);
	if (json) {
		cJSON *j = nccl_env_json(&e);
		fabric_print_json(j);
		cJSON_Delete(j);
	} else if ((text = nccl_env_render(&e)) == NULL) {
		rc = fabric_fail("nccl-env", "out of memory");
	} else {
		char full[4096];
		if (write == NULL)
			fputs(text, stdout);
		else if (fabric_abs_path(write, full, sizeof(full)) < 0 ||
			 hostfs_install("/", full, text, strlen(text), 0644, NULL) < 0)
			rc = fabric_fail("nccl-env --write", strerror(errno ? errno : EIO));
		else
			fprintf(stderr, "privai-fabric: wrote %s; privai-engine's GPU ranks read it from %s\n", write,
				"PRIVAI_NCCL_CONFIG_DIR (default /etc/privai)");
		free(text);
	}
	fabric_free(&f);
	return rc;
}
