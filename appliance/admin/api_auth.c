/*
 * /api/v1/auth: log in (a session cookie, HttpOnly and SameSite=Strict,
 * Secure under TLS, plus a CSRF token the console sends back in
 * X-CSRF-Token), log out, who am I, change my password.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "privai/status.h"
#include "admin.h"
#include "httpd.h"

static cJSON *
user_json(const struct principal *p)
{
	cJSON *u = cJSON_CreateObject();

	cJSON_AddNumberToObject(u, "id", (double)p->user_id);
	cJSON_AddStringToObject(u, "name", p->name);
	cJSON_AddStringToObject(u, "role", role_name(p->role));
	return u;
}

static int
must_change_password(sqlite3 *db, int64_t user_id)
{
	sqlite3_stmt *st;
	int v = 0;

	if (sqlite3_prepare_v2(db, "SELECT must_change_password FROM users WHERE id = ?", -1, &st, NULL) != SQLITE_OK)
		return 0;
	sqlite3_bind_int64(st, 1, user_id);
	if (sqlite3_step(st) == SQLITE_ROW)
		v = sqlite3_column_int(st, 0);
	sqlite3_finalize(st);
	return v;
}

static void
h_login(struct req *r)
{
	static const char *const known[] = { "name", "password", NULL };
	char cookie[AUTH_SECRET_LEN], hdr[256], err[PRIVAI_ERR_LEN], wait_s[16];
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
		cJSON_Delete(j);
		return;
	}
	int rc = auth_login(r->a->db, name, password, r->addr, r->now, cookie, &p, err);
	cJSON *d = cJSON_CreateObject();
	cJSON_AddStringToObject(d, "name", name);
	if (rc != PRIVAI_OK) {
		atomic_fetch_add(&r->a->logins_failed, 1);
		cJSON_AddStringToObject(d, "error", err);
		req_audit(r, "auth.login", name, "refused", d);
		cJSON_Delete(j);
		if (rc == PRIVAI_EBUSY)
			reply_error(r, 429, "account_locked", NULL, "%s", err);
		else if (rc == PRIVAI_EINVAL)
			reply_error(r, 401, "bad_credentials", NULL, "%s", err);
		else
			reply_status(r, rc, NULL, err);
		return;
	}
	cJSON_Delete(j);
	atomic_fetch_add(&r->a->logins_ok, 1);
	r->authed = 1;
	r->who = p;
	req_audit(r, "auth.login", p.name, "ok", d);
	snprintf(hdr, sizeof(hdr), "privai_session=%s; Path=/; Max-Age=%d; HttpOnly; SameSite=Strict%s", cookie,
		 AUTH_SESSION_SECONDS, r->a->tls ? "; Secure" : "");
	reply_header(r, "Set-Cookie", hdr);
	cJSON *root = cJSON_CreateObject();
	cJSON_AddItemToObject(root, "user", user_json(&p));
	cJSON_AddStringToObject(root, "csrf_token", p.csrf);
	cJSON_AddNumberToObject(root, "expires_at", (double)(r->now + AUTH_SESSION_SECONDS));
	cJSON_AddBoolToObject(root, "must_change_password", must_change_password(r->a->db, p.user_id));
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
	auth_logout(r->a->db, MHD_lookup_connection_value(r->c, MHD_COOKIE_KIND, "privai_session"));
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
	cJSON_AddBoolToObject(root, "must_change_password", must_change_password(r->a->db, r->who.user_id));
	reply_json(r, 200, root);
}

static void
h_password(struct req *r)
{
	static const char *const known[] = { "current_password", "new_password", NULL };
	char err[PRIVAI_ERR_LEN], cookie[AUTH_SECRET_LEN];
	struct principal check;
	const char *cur, *next;
	cJSON *j;

	if ((j = body_object(r)) == NULL)
		return;
	if (fields_known(r, j, known) < 0 || (cur = field_str(r, j, "current_password", 1, 1024, NULL)) == NULL ||
	    (next = field_str(r, j, "new_password", 1, 1024, NULL)) == NULL) {
		cJSON_Delete(j);
		return;
	}
	/* the current password is checked the way a login is: it counts
	 * towards the lockout, so a stolen session cannot guess it */
	int rc = auth_login(r->a->db, r->who.name, cur, r->addr, r->now, cookie, &check, err);
	if (rc != PRIVAI_OK) {
		cJSON_Delete(j);
		reply_error(r, rc == PRIVAI_EBUSY ? 429 : 403, "bad_credentials", "current_password", "%s", err);
		return;
	}
	auth_logout(r->a->db, cookie);
	rc = auth_user_set_password(r->a->db, r->who.user_id, next, err);
	cJSON_Delete(j);
	if (rc != PRIVAI_OK) {
		reply_status(r, rc, "new_password", err);
		return;
	}
	req_audit(r, "user.password", r->who.name, "ok", NULL);
	reply_empty(r, 204);
}

const struct route api_auth_routes[] = {
	{ "POST", "/api/v1/auth/login", 0, ROUTE_PUBLIC, h_login, NULL },
	{ "POST", "/api/v1/auth/logout", ROLE_VIEWER, 0, h_logout, NULL },
	{ "GET", "/api/v1/auth/me", ROLE_VIEWER, 0, h_me, NULL },
	{ "POST", "/api/v1/auth/password", ROLE_VIEWER, 0, h_password, NULL },
	{ NULL, NULL, 0, 0, NULL, NULL },
};
