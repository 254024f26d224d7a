/*
 * Deployments, whoever changes them (an operator's request, a leader's
 * spec on a member, a drain, day 0): the OpenAI endpoint's API keys
 * (shown once, only SHA-256 kept), serving options, engine ports, and
 * moving a deployment to another node.
 */
#ifndef PRIVAI_ADMIN_DEPLOYMENTS_H
#define PRIVAI_ADMIN_DEPLOYMENTS_H

#include <cjson/cJSON.h>
#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

struct admin;

#define DEPLOY_KEY_LEN 64

/* A new key "sk-..." for deployment id, its hash stored; the caller
 * rewrites the engine's key file (supervisor_keys_changed). */
int deploy_key_create(sqlite3 *db, int64_t deployment_id, const char *name, int64_t now, char *ret_key, int64_t *ret_id,
		      char *err);

/* The first port of the engine range that no deployment holds and
 * nothing else has bound; APP_EBUSY when none. */
/* The host of an http(s) URL (the console's --advertise-url, where a
 * split deployment's rank 0 listens for its ranks), without its port;
 * APP_EINVAL when it does not parse. */
int deploy_url_host(const char *url, char *out, size_t size);
int deploy_pick_port(struct admin *a);

/* Check serving options (ctx, parallel, batch, kv_cache_mib,
 * chat_template) from an operator or a leader and rebuild them as JSON
 * in *ret (malloc'd).  APP_EINVAL with the field and reason, APP_EUNSUPPORTED for
 * an unknown field. */
int deploy_options_parse(const cJSON *o, char **ret, char *field, size_t field_size, char *err, size_t size);

/* Move deployment id to node `to` (0: this node), stopping it where it
 * ran (deploy/move.c); why (or NULL) goes into its reason after "moved
 * from NODE".  Its placement becomes to_placement, or (NULL) the stored
 * one with its node changed.  *ret_detail gets {"from", "to"} for the
 * audit log.  The caller holds the store's mutex and checked the target. */
int deploy_move(struct admin *a, int64_t id, int64_t to, const char *to_placement, const char *why, cJSON **ret_detail,
		char *err);
/* The ready node other than `from` with `threads` CPUs or more (0: any)
 * and the fewest running deployments: its id, 0 for this node, APP_ENOTFOUND
 * for none. */
int64_t deploy_pick_node(struct admin *a, int64_t from, long threads);

/* Move every running deployment off node (is_self: this one) to the
 * other ready nodes with the CPUs, the least loaded first; one with
 * nowhere to go stays (a drain stops it).  Adds {id, name, from, to} to
 * the array moved for each.  The caller holds the store's mutex. */
int deploy_move_all(struct admin *a, int64_t node, int is_self, const char *why, cJSON *moved, char *err);

/* Tell the running engines of model base_id's deployments on this node to
 * load LoRA adapter name from path (load 1), or to unload it (load 0).
 * Deployments on other nodes are not told: adapters are not yet shipped
 * to members.  The reply's {"loaded"|"unloaded": [ids], "failed":
 * [{"deployment", "error"}], "other_nodes": [ids]}, NULL when out of
 * memory; *busy is set when an engine refused an unload because requests
 * use the adapter.  The caller holds the store's mutex; each engine has
 * 10 s to answer. */
cJSON *deploy_lora_sync(struct admin *a, int64_t base_id, const char *name, const char *path, int load, int *busy);

#endif
