/*
 * /api/v1/cluster/deployments/{leader id}/...: on a member, the way in to
 * the engines it runs for the leader (cluster/remote.h).  The engines listen on
 * loopback; this passes a request on to one.  Completions carry the
 * caller's own Authorization, which the engine checks against the
 * deployment's keys (mirrored from the leader, with the leader's relay
 * key); the metrics and the log are for the leader's relay key only.
 */
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "strfmt.h"
#include "admin.h"
#include "api/deployments.h"
#include "http/httpd.h"
#include "cluster/remote.h"
#include "deploy/supervisor.h"

/* The local deployment the leader's id names, taking the store's mutex;
 * -1 after replying 404. */
static int64_t
local_id(struct req *r)
{
	int64_t leader_id = arg_id(r, 0, "deployment"), id;

	if (leader_id < 0)
		return APP_ENOTFOUND;
	pthread_mutex_lock(&r->a->db_mu);
	id = member_local_id(r->a->db, leader_id);
	pthread_mutex_unlock(&r->a->db_mu);
	if (id < 0)
		reply_error(r, 404, "not_found", NULL, "this node runs no deployment %lld for its leader",
			    (long long)leader_id);
	return id;
}

/* Is the bearer the leader's relay key?  0, or -1 after replying 401. */
static int
leader_only(struct req *r)
{
	const char *h = MHD_lookup_connection_value(r->c, MHD_HEADER_KIND, "Authorization");
	struct membership m;
	unsigned char d[crypto_hash_sha256_BYTES];
	char hex[65];
	int member;

	pthread_mutex_lock(&r->a->db_mu);
	member = load_membership(r->a, &m);
	pthread_mutex_unlock(&r->a->db_mu);
	if (h != NULL && strncmp(h, "Bearer ", 7) == 0 && strlen(h) < 200) {
		crypto_hash_sha256(d, (const unsigned char *)h + 7, strlen(h + 7));
		sodium_bin2hex(hex, sizeof(hex), d, sizeof(d));
		if (member && m.relay_sha[0] != '\0' && sodium_memcmp(hex, m.relay_sha, 64) == 0)
			return 0;
	}
	reply_error(r, 401, "unauthenticated", NULL, "this is for the leader's relay key only");
	return APP_EDENIED;
}

/* Pass the request on to the engine: with the caller's key (the engine
 * checks it) for what an application sends, with the admin's own for
 * what only the leader reads (metrics). */
static void
relay(struct req *r, const char *engine_path, int post, int as_caller)
{
	char url[128], key[80], auth[128], who[96];
	const char *caller = MHD_lookup_connection_value(r->c, MHD_HEADER_KIND, "Authorization");
	int64_t id;
	int port;

	/* the engine checks the key; without one the answer is 401 here,
	 * so an anonymous caller learns nothing, not even which ids exist */
	if (as_caller && (caller == NULL || strncmp(caller, "Bearer ", 7) != 0)) {
		reply_error(r, 401, "unauthenticated", NULL,
			    "send the deployment's API key (Authorization: Bearer ...)");
		return;
	}
	if ((id = local_id(r)) < 0)
		return;
	if (supervisor_endpoint(r->a->sup, id, &port, key, sizeof(key)) != 0) {
		reply_error(r, 409, "not_ready", NULL, "deployment %s is not ready on this node", r->arg[0]);
		return;
	}
	if (str_fmt(url, sizeof(url), "http://127.0.0.1:%d%s", port, engine_path) != APP_OK) {
		reply_error(r, 500, "internal", NULL, "the engine's URL does not fit its buffer");
		return;
	}
	msg_fmt(who, sizeof(who), "the engine of deployment %s", r->arg[0]);
	if (as_caller) {
		if (caller != NULL && strlen(caller) >= sizeof(auth))
			caller = NULL;
		deploy_forward(r, url, caller, NULL, post, who);
	} else {
		snprintf(auth, sizeof(auth), "Bearer %s", key);
		deploy_forward(r, url, auth, NULL, 0, who);
	}
	sodium_memzero(key, sizeof(key)); /* libcurl has its own copy */
	sodium_memzero(auth, sizeof(auth));
}

static void
h_chat(struct req *r)
{
	relay(r, "/v1/chat/completions", 1, 1);
}

static void
h_completions(struct req *r)
{
	relay(r, "/v1/completions", 1, 1);
}

/* what the deployment serves (its name and adapters), so an OpenAI SDK
 * pointed at the endpoint lists and retrieves models as it expects */
static void
h_models(struct req *r)
{
	relay(r, "/v1/models", 0, 1);
}

static void
h_model(struct req *r)
{
	char path[300];

	if (str_fmt(path, sizeof(path), "/v1/models/%s", r->arg[1]) != APP_OK ||
	    strspn(r->arg[1], "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-") !=
		    strlen(r->arg[1])) {
		reply_error(r, 404, "not_found", NULL, "no such model");
		return;
	}
	relay(r, path, 0, 1);
}

static void
h_metrics(struct req *r)
{
	if (leader_only(r) == 0)
		relay(r, "/metrics", 0, 0);
}

static void
h_logs(struct req *r)
{
	int64_t id;

	if (leader_only(r) == 0 && (id = local_id(r)) > 0)
		deploy_reply_log(r, id);
}

const struct route api_relay_routes[] = {
	{ "POST", "/api/v1/cluster/deployments/{id}/v1/chat/completions", ROLE_VIEWER,
	  ROUTE_PUBLIC | ROUTE_UNLOCKED | ROUTE_READ_ONLY, h_chat, NULL, NULL },
	{ "POST", "/api/v1/cluster/deployments/{id}/v1/completions", ROLE_VIEWER,
	  ROUTE_PUBLIC | ROUTE_UNLOCKED | ROUTE_READ_ONLY, h_completions, NULL, NULL },
	{ "GET", "/api/v1/cluster/deployments/{id}/v1/models", ROLE_VIEWER, ROUTE_PUBLIC | ROUTE_UNLOCKED, h_models,
	  NULL, NULL },
	{ "GET", "/api/v1/cluster/deployments/{id}/v1/models/{model}", ROLE_VIEWER, ROUTE_PUBLIC | ROUTE_UNLOCKED,
	  h_model, NULL, NULL },
	{ "GET", "/api/v1/cluster/deployments/{id}/metrics", ROLE_VIEWER, ROUTE_PUBLIC | ROUTE_UNLOCKED, h_metrics,
	  NULL, NULL },
	{ "GET", "/api/v1/cluster/deployments/{id}/logs", ROLE_VIEWER, ROUTE_PUBLIC | ROUTE_UNLOCKED, h_logs, NULL,
	  NULL },
	{ NULL, NULL, 0, 0, NULL, NULL, NULL },
};
