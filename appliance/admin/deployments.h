/*
 * Shared by the deployment resources (api_deployments.c, api_deploy_ops.c):
 * the OpenAI endpoint's API keys (shown once, only SHA-256 kept) and the
 * reply that carries a new key.
 */
#ifndef PRIVAI_ADMIN_DEPLOYMENTS_H
#define PRIVAI_ADMIN_DEPLOYMENTS_H

#include <cjson/cJSON.h>
#include <sqlite3.h>
#include <stddef.h>
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

/* Check serving options (ctx, parallel, batch, kv_cache_mib,
 * chat_template) from an operator or a leader and rebuild them as JSON
 * in *ret (malloc'd).  -1 with the field and reason, -2 for an unknown
 * field. */
int deploy_options_parse(const cJSON *o, char **ret, char *field, size_t field_size, char *err, size_t size);

/* Send the request (its body when post) to url with Authorization:
 * auth (NULL: none), checking the far end's key pin when one is given,
 * and reply with its answer as it arrives (proxy_stream.c: a streamed
 * completion's events are passed on one by one); who names the far end
 * in a 502. */
void deploy_forward(struct req *r, const char *url, const char *auth, const char *pin, int post, const char *who);
/* Close the connections deploy_forward keeps open between requests. */
void deploy_forward_shutdown(void);

/* A deployment the cluster's leader placed on this node is changed on
 * the leader only: 1 after replying 409. */
int deploy_refuse_if_leader_owned(struct req *r, int64_t id);

/* Reply with the tail of deployment id's engine log on this node
 * (the "lines" query, 1..10000, default 200). */
void deploy_reply_log(struct req *r, int64_t id);

/* Move deployment id to node `to` (0: this node), stopping it where it
 * ran (deploy_move.c); why (or NULL) goes into its reason after "moved
 * from NODE".  Its placement becomes to_placement, or (NULL) the stored
 * one with its node changed.  *ret_detail gets {"from", "to"} for the
 * audit log.  The caller holds the store's mutex and checked the target. */
int deploy_move(struct admin *a, int64_t id, int64_t to, const char *to_placement, const char *why,
		cJSON **ret_detail, char *err);
/* The ready node other than `from` with `threads` CPUs or more (0: any)
 * and the fewest running deployments: its id, 0 for this node, -1 for
 * none. */
int64_t deploy_pick_node(struct admin *a, int64_t from, long threads);

/* Move every running deployment off node (is_self: this one) to the
 * other ready nodes with the CPUs, the least loaded first; one with
 * nowhere to go stays (a drain stops it).  Adds {id, name, from, to} to
 * the array moved for each.  The caller holds the store's mutex. */
int deploy_move_all(struct admin *a, int64_t node, int is_self, const char *why, cJSON *moved, char *err);

/* The deployment's row with "api_key" added. */
void reply_deployment_with_key(struct req *r, unsigned status, int64_t id, const char *key);

#endif
