/*
 * /api/v1/tokens: bearer tokens for automation.  The token text is in the
 * creation reply only; scopes (read, write, admin) cap what it may do and
 * can never exceed its creator's power: the user's role in a session, the
 * token's own scopes when a token makes a token.  A token made with a
 * token never outlives it and is revoked with it; a read-scoped token
 * changes nothing, so it makes no tokens (http/httpd.c refuses it).  Every
 * token expires.
 */
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "status.h"
#include "admin.h"
#include "http/httpd.h"

#define TOKEN_COLUMNS                                                                                                  \
	"SELECT t.id, t.name, u.name AS user, t.scopes, t.created_at, t.expires_at, t.revoked_at, "                    \
	"t.revoked_reason, t.last_used_at, t.parent_token_id FROM api_tokens t JOIN users u ON u.id = t.user_id"
#define DEFAULT_DAYS 90

static void
h_list(struct req *r)
{
	const char *all = query_arg(r, "all");

	if (all != NULL && strcmp(all, "1") == 0) {
		if (r->who.role < ROLE_ADMIN) {
			reply_error(r, 403, "forbidden", "all", "only an admin sees every user's tokens");
			return;
		}
		reply_query(r, 200, TOKEN_COLUMNS " ORDER BY t.id", 0, NULL, NULL);
		return;
	}
	reply_query(r, 200, TOKEN_COLUMNS " WHERE t.user_id = ?1 ORDER BY t.id", 1, &r->who.user_id, NULL);
}

/* scopes as a JSON array of words, joined with spaces into out */
static int
scopes_field(struct req *r, const cJSON *j, char *out, size_t size)
{
	const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "scopes"), *it;

	out[0] = '\0';
	if (!cJSON_IsArray(s) || cJSON_GetArraySize(s) == 0 || cJSON_GetArraySize(s) > 3) {
		reply_error(r, 422, "invalid_field", "scopes", "scopes is a list of 1-3 of read, write, admin");
		return APP_EINVAL;
	}
	cJSON_ArrayForEach (it, s) {
		if (!cJSON_IsString(it) || strlen(it->valuestring) > 8) {
			reply_error(r, 422, "invalid_field", "scopes", "scopes is a list of 1-3 of read, write, admin");
			return APP_EINVAL;
		}
		if (out[0] != '\0')
			strncat(out, " ", size - strlen(out) - 1);
		strncat(out, it->valuestring, size - strlen(out) - 1);
	}
	if (scope_role(out) == 0) {
		reply_error(r, 422, "invalid_field", "scopes", "unknown scope in '%s' (read, write, admin)", out);
		return APP_EINVAL;
	}
	return 0;
}

static void
h_create(struct req *r)
{
	static const char *const known[] = { "name", "scopes", "expires_in_days", NULL };
	char err[APP_ERR_LEN], token[AUTH_SECRET_LEN], scopes[32];
	const char *name;
	int64_t days, id;
	cJSON *j;

	if ((j = body_object(r)) == NULL)
		return;
	if (fields_known(r, j, known) < 0 || (name = field_str(r, j, "name", 1, 64, NULL)) == NULL ||
	    scopes_field(r, j, scopes, sizeof(scopes)) < 0 ||
	    field_int(r, j, "expires_in_days", 0, 1, 3650, DEFAULT_DAYS, &days) < 0)
		goto out;
	if (scope_role(scopes) > r->who.role) {
		reply_error(r, 403, "forbidden", "scopes", "scopes '%s' exceed %s (%s)", scopes,
			    r->authed == 2 ? "the token this request was made with" : "your role",
			    role_name(r->who.role));
		goto out;
	}
	int64_t expires = r->now + days * 86400;
	if (r->authed == 2 && r->who.token_expires != 0 && expires > r->who.token_expires) {
		/* not past the token it was made with: by default it ends
		 * with it, asked for longer it is refused */
		if (cJSON_GetObjectItemCaseSensitive(j, "expires_in_days") != NULL) {
			reply_error(r, 422, "invalid_field", "expires_in_days",
				    "a token made with token %lld cannot "
				    "outlive it (it expires in %lld s)",
				    (long long)r->who.token_id, (long long)(r->who.token_expires - r->now));
			goto out;
		}
		expires = r->who.token_expires;
	}
	int rc = auth_token_create(r->a->db, r->who.user_id, r->authed == 2 ? r->who.token_id : 0, name, scopes,
				   expires, r->now, token, &id, err);
	if (rc != APP_OK) {
		reply_status(r, rc, "name", err);
		goto out;
	}
	cJSON *d = cJSON_CreateObject();
	cJSON_AddStringToObject(d, "scopes", scopes);
	cJSON_AddNumberToObject(d, "expires_at", (double)expires);
	if (r->authed == 2)
		cJSON_AddNumberToObject(d, "made_with_token", (double)r->who.token_id);
	char target[32];
	snprintf(target, sizeof(target), "token/%lld", (long long)id);
	req_audit(r, "token.create", target, "ok", d);
	cJSON *root = cJSON_CreateObject();
	cJSON_AddNumberToObject(root, "id", (double)id);
	cJSON_AddStringToObject(root, "name", name);
	cJSON_AddStringToObject(root, "token", token);
	cJSON_AddStringToObject(root, "scopes", scopes);
	cJSON_AddNumberToObject(root, "expires_at", (double)expires);
	if (r->authed == 2)
		cJSON_AddNumberToObject(root, "parent_token_id", (double)r->who.token_id);
	else
		cJSON_AddNullToObject(root, "parent_token_id");
	reply_json(r, 201, root);
	sodium_memzero(token, sizeof(token));
out:
	cJSON_Delete(j);
}

static void
h_revoke(struct req *r)
{
	char err[APP_ERR_LEN], target[32];
	int64_t id = arg_id(r, 0, "token");

	if (id < 0)
		return;
	int64_t owner = auth_token_owner(r->a->db, id);
	/* someone else's token is "not found" to a non-admin: ids say nothing */
	if (owner < 0 || (owner != r->who.user_id && r->who.role < ROLE_ADMIN)) {
		reply_error(r, 404, "not_found", NULL, "no token %lld", (long long)id);
		return;
	}
	int rc = auth_token_revoke(r->a->db, id, r->now, "revoked by hand", err);
	if (rc != APP_OK) {
		reply_error(r, 409, "already_revoked", NULL, "token %lld is already revoked", (long long)id);
		return;
	}
	snprintf(target, sizeof(target), "token/%lld", (long long)id);
	req_audit(r, "token.revoke", target, "ok", NULL);
	reply_empty(r, 204);
}

const struct route api_tokens_routes[] = {
	{ "GET", "/api/v1/tokens", ROLE_VIEWER, 0, h_list, NULL, NULL },
	{ "POST", "/api/v1/tokens", ROLE_VIEWER, 0, h_create, NULL, "token.create" },
	{ "DELETE", "/api/v1/tokens/{id}", ROLE_VIEWER, 0, h_revoke, NULL, "token.revoke" },
	{ NULL, NULL, 0, 0, NULL, NULL, NULL },
};
