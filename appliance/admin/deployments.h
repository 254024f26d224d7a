/*
 * Shared by the deployment resources (api_deployments.c, api_deploy_ops.c):
 * the OpenAI endpoint's API keys (shown once, only SHA-256 kept) and the
 * reply that carries a new key.
 */
#ifndef PRIVAI_ADMIN_DEPLOYMENTS_H
#define PRIVAI_ADMIN_DEPLOYMENTS_H

#include <sqlite3.h>
#include <stdint.h>

struct req;
struct admin;

#define DEPLOY_KEY_LEN 64

/* A new key "sk-..." for deployment id, its hash stored; the caller
 * rewrites the engine's key file (supervisor_keys_changed). */
int deploy_key_create(sqlite3 *db, int64_t deployment_id, const char *name, int64_t now, char *ret_key,
		      int64_t *ret_id, char *err);

/* The first port of the engine range that no deployment holds and
 * nothing else has bound; -1 when none. */
int deployment_pick_port(struct admin *a);

/* The deployment's row with "api_key" added. */
void reply_deployment_with_key(struct req *r, unsigned status, int64_t id, const char *key);

#endif
