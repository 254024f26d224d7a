/* privai-fabric's commands and what they share. */
#ifndef PRIVAI_FABRIC_CMD_H
#define PRIVAI_FABRIC_CMD_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "settings.h"

struct fabric_opts {
	const char *root;
	struct fabric_settings s;
};

/* Take --root and --config out of argv (anywhere after the command), read
 * the config file and the settings.  0, or an APP_E* code with err. */
int fabric_opts_parse(struct fabric_opts *o, int *argc, char **argv, char *err, size_t errsize);

/* Whether we look at the live host, where libibverbs and systemd apply. */
int fabric_live(const struct fabric_opts *o);

/* A file the user named, made absolute against the working directory
 * (hostfs takes paths from a root).  0, or an APP_E* code when it does not fit. */
int fabric_abs_path(const char *path, char *out, size_t size);

int fabric_usage_error(const char *cmd, const char *arg); /* prints, returns 2 */
int fabric_fail(const char *what, const char *err);       /* prints, returns 2 */
void fabric_print_json(const cJSON *j);

int cmd_fm_config(struct fabric_opts *o, int argc, char **argv);
int cmd_fm(struct fabric_opts *o, int argc, char **argv);
int cmd_serve(struct fabric_opts *o, int argc, char **argv);
int cmd_nccl_env(struct fabric_opts *o, int argc, char **argv);
int cmd_validate(struct fabric_opts *o, int argc, char **argv);

/* Keep the settings' nccl.env current from f (nccl_env.h): written when
 * missing or when it still carries privai-fabric's first line, left alone
 * when an operator took that line out.  *ret_status (may be NULL): {path,
 * state: written|current|hand-edited|error, settings}.  0, or an APP_E*
 * code. */
struct fabric;
int fabric_nccl_env_sync(const struct fabric_opts *o, const struct fabric *f, cJSON **ret_status);

#endif
