/*
 * /api/v1/auth: log in (a session cookie, HttpOnly and SameSite=Strict,
 * Secure under TLS, plus a CSRF token the console sends back in
 * X-CSRF-Token), log out, who am I, change my password.
 */
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "status.h"
#include "strfmt.h"
#include "admin.h"
#include "store/db.h"
#include "http/httpd.h"
#include "seed.h"

static cJSON *
user_json(const struct principal *p)
{
	cJSON *u = cJSON_CreateObject();

	cJSON_AddNumberToObject(u, "id", (double)p->user_id);
	cJSON_AddStringToObject(u, "name", p->name);
	cJSON_AddStringToObject(u, "role", role_name(p->role));
	return u;
}

static void
h_login(struct req *r)
{
	static const char *const known[] = { "name", "password", NULL };
	char cookie[AUTH_SECRET_LEN], hdr[256], err[APP_ERR_LEN], wait_s[16];
	struct principal p;
	cJSON *j;
	const char *name, *password;

	int wait = ratelimit_take(&r->a->login_limit, r->addr, admin_mono_ms());
	if (wait > 0) {
		snprintf(wait_s, sizeof(wait_s), "%d", wait);
		reply_header(r, "Retry-After", wait_s);
		reply_error(r, 429, "rate_limited", NULL, "too many login attempts from %s; try again in %d s", r->addr,
			    wait);
		return;
	}
	if ((j = body_object(r)) == NULL)
		return;
	if (fields_known(r, j, known) < 0 || (name = field_str(r, j, "name", 1, 64, NULL)) == NULL ||
	    (password = field_str(r, j, "password", 1, 1024, NULL)) == NULL) {
		body_wipe(j);
		return;
	}
	/* the route is unlocked: the store's lock is taken around the store's
	 * two steps only, and the Argon2 check (~130 ms) runs without it */
	struct login_attempt la;
	pthread_mutex_lock(&r->a->db_mu);
	int rc = auth_login_lookup(r->a->db, name, password, &la, err);
	pthread_mutex_unlock(&r->a->db_mu);
	if (rc == APP_OK)
		auth_login_verify(&la, password);
	pthread_mutex_lock(&r->a->db_mu);
	if (rc == APP_OK)
		rc = auth_login_finish(r->a->db, &la, r->addr, r->now, cookie, &p, err);
	sodium_memzero(&la, sizeof(la));
	cJSON *d = cJSON_CreateObject();
	cJSON_AddStringToObject(d, "name", name);
	if (rc != APP_OK) {
		atomic_fetch_add(&r->a->logins_failed, 1);
		cJSON_AddStringToObject(d, "error", err);
		req_audit(r, "auth.login", name, "refused", d);
		body_wipe(j);
		if (rc == APP_EBUSY)
			reply_error(r, 429, "account_locked", NULL, "%s", err);
		else if (rc == APP_EINVAL)
			reply_error(r, 401, "bad_credentials", NULL, "%s", err);
		else
			reply_status(r, rc, NULL, err);
		pthread_mutex_unlock(&r->a->db_mu);
		return;
	}
	body_wipe(j);
	atomic_fetch_add(&r->a->logins_ok, 1);
	r->authed = 1;
	r->who = p;
	req_audit(r, "auth.login", p.name, "ok", d);
	snprintf(hdr, sizeof(hdr), "privai_session=%s; Path=/; Max-Age=%d; HttpOnly; SameSite=Strict%s", cookie,
		 AUTH_SESSION_SECONDS, r->a->tls ? "; Secure" : "");
	reply_header(r, "Set-Cookie", hdr);
	sodium_memzero(hdr, sizeof(hdr));
	cJSON *root = cJSON_CreateObject();
	cJSON_AddItemToObject(root, "user", user_json(&p));
	cJSON_AddStringToObject(root, "csrf_token", p.csrf);
	sodium_memzero(cookie, sizeof(cookie));
	cJSON_AddNumberToObject(root, "expires_at", (double)(r->now + AUTH_SESSION_SECONDS));
	cJSON_AddBoolToObject(root, "must_change_password", auth_must_change(r->a->db, p.user_id));
	pthread_mutex_unlock(&r->a->db_mu);
	reply_json(r, 200, root);
}

static void
h_logout(struct req *r)
{
	char hdr[160];

	if (r->authed != 1) {
		reply_error(r, 422, "not_a_session", NULL, "logout ends a browser session; revoke a token instead");
		return;
	}
	if (auth_logout(r->a->db, session_cookie(r)) == APP_EIO) {
		reply_error(r, 500, "internal", NULL, "the session could not be ended: %s", sqlite3_errmsg(r->a->db));
		return;
	}
	req_audit(r, "auth.logout", r->who.name, "ok", NULL);
	snprintf(hdr, sizeof(hdr), "privai_session=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict%s",
		 r->a->tls ? "; Secure" : "");
	reply_header(r, "Set-Cookie", hdr);
	reply_empty(r, 204);
}

static void
h_me(struct req *r)
{
	cJSON *root = cJSON_CreateObject();

	cJSON_AddItemToObject(root, "user", user_json(&r->who));
	cJSON_AddStringToObject(root, "via", r->authed == 1 ? "session" : "token");
	if (r->authed == 1)
		cJSON_AddStringToObject(root, "csrf_token", r->who.csrf);
	else
		cJSON_AddNumberToObject(root, "token_id", (double)r->who.token_id);
	cJSON_AddBoolToObject(root, "must_change_password", auth_must_change(r->a->db, r->who.user_id));
	reply_json(r, 200, root);
}

/* The first admin's one-time password, when it went to a file rather
 * than a terminal (seed.c), is gone once the admin has chosen their own. */
static void
forget_first_password(struct req *r)
{
	char path[4096 + 64];

	if (strcmp(r->who.name, "admin") != 0)
		return;
	if (str_fmt(path, sizeof(path), "%s/%s", r->a->cfg.state_dir, SEED_PASSWORD_FILE) == APP_OK)
		unlink(path);
}

/*
 * Change one's own password, in a session (a token cannot: whoever holds
 * one should not be able to lock the account's owner out).  Every other
 * session of the account ends; every API token of the account is revoked
 * unless "revoke_tokens": false, and the reply says which were.
 */
static void
h_password(struct req *r)
{
	static const char *const known[] = { "current_password", "new_password", "revoke_tokens", NULL };
	char err[APP_ERR_LEN], new_err[APP_ERR_LEN], cookie[AUTH_SECRET_LEN], hash[AUTH_HASH_LEN] = "";
	struct principal check;
	struct login_attempt la;
	const char *cur, *next;
	int revoke_tokens, ended, rc, new_rc;
	cJSON *j, *revoked = NULL;

	if (r->authed != 1) {
		reply_error(r, 422, "not_a_session", NULL,
			    "a password is changed in a signed-in session, not with a "
			    "token");
		return;
	}
	if ((j = body_object(r)) == NULL)
		return;
	if (fields_known(r, j, known) < 0 || (cur = field_str(r, j, "current_password", 1, 1024, NULL)) == NULL ||
	    (next = field_str(r, j, "new_password", 1, 1024, NULL)) == NULL ||
	    field_bool(r, j, "revoke_tokens", 1, &revoke_tokens) < 0)
		goto out;
	/* the route is unlocked: both Argon2 steps (checking the current
	 * password, hashing the new one) run without the store's lock, the
	 * store's steps under it.  The current password is checked the way a
	 * login is: it counts towards the lockout, so a stolen session cannot
	 * guess it. */
	pthread_mutex_lock(&r->a->db_mu);
	rc = auth_login_lookup(r->a->db, r->who.name, cur, &la, err);
	pthread_mutex_unlock(&r->a->db_mu);
	if (rc == APP_OK)
		auth_login_verify(&la, cur);
	new_rc = strcmp(cur, next) == 0 ? APP_OK : auth_user_prepare(r->who.name, next, r->who.role, hash, new_err);
	pthread_mutex_lock(&r->a->db_mu);
	if (rc == APP_OK)
		rc = auth_login_finish(r->a->db, &la, r->addr, r->now, cookie, &check, err);
	sodium_memzero(&la, sizeof(la));
	if (rc != APP_OK) {
		reply_error(r, rc == APP_EBUSY ? 429 : 403, "bad_credentials", "current_password", "%s", err);
		goto unlock;
	}
	/* the check made a session of its own; it must not outlive the check */
	rc = auth_logout(r->a->db, cookie);
	sodium_memzero(cookie, sizeof(cookie));
	if (rc == APP_EIO) {
		reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
		goto unlock;
	}
	if (strcmp(cur, next) == 0) {
		reply_error(r, 422, "invalid_field", "new_password", "the new password is the current one");
		goto unlock;
	}
	if (new_rc != APP_OK) {
		reply_status(r, new_rc, "new_password", new_err);
		goto unlock;
	}
	if (db_begin(r->a->db) != APP_OK) {
		reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
		goto unlock;
	}
	if ((rc = auth_user_set_hash(r->a->db, r->who.user_id, hash, 0, err)) != APP_OK ||
	    (rc = auth_end_access(r->a->db, r->who.user_id, session_cookie(r), revoke_tokens, r->now,
				  "the owner's password changed", &ended, &revoked, err)) != APP_OK ||
	    (rc = db_commit(r->a->db) == APP_OK
			  ? APP_OK
			  : app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(r->a->db))) != APP_OK) {
		db_rollback(r->a->db);
		reply_status(r, rc, "new_password", err);
		goto unlock;
	}
	forget_first_password(r);
	cJSON *d = cJSON_CreateObject(), *root = cJSON_CreateObject();
	cJSON_AddNumberToObject(d, "sessions_ended", ended);
	cJSON_AddItemToObject(d, "tokens_revoked", cJSON_Duplicate(revoked, 1));
	req_audit(r, "user.password", r->who.name, "ok", d);
	cJSON_AddNumberToObject(root, "sessions_ended", ended);
	cJSON_AddItemToObject(root, "tokens_revoked", revoked);
	reply_json(r, 200, root);
unlock:
	pthread_mutex_unlock(&r->a->db_mu);
out:
	sodium_memzero(hash, sizeof(hash));
	body_wipe(j);
}

const struct route api_auth_routes[] = {
	{ "POST", "/api/v1/auth/login", 0, ROUTE_PUBLIC | ROUTE_UNLOCKED, h_login, NULL, "auth.login" },
	{ "POST", "/api/v1/auth/logout", ROLE_VIEWER, ROUTE_ONE_TIME_OK, h_logout, NULL, "auth.logout" },
	{ "GET", "/api/v1/auth/me", ROLE_VIEWER, ROUTE_ONE_TIME_OK, h_me, NULL, NULL },
	{ "POST", "/api/v1/auth/password", ROLE_VIEWER, ROUTE_ONE_TIME_OK | ROUTE_UNLOCKED, h_password, NULL,
	  "user.password" },
	{ NULL, NULL, 0, 0, NULL, NULL, NULL },
};
