/*
 * /api/v1/users: local accounts (admin only).  The last admin can be
 * neither removed nor demoted, and nobody removes their own account, so
 * the appliance always has someone who can manage it.  A password an
 * admin sets for someone else is one-time unless said otherwise, and it
 * ends that account's sessions and API tokens.
 */
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "status.h"
#include "admin.h"
#include "store/db.h"
#include "http/httpd.h"

#define USER_COLUMNS                                                                                                   \
	"SELECT id, name, role, created_at, must_change_password, failed_logins, "                                     \
	"CASE WHEN locked_until > strftime('%s','now') THEN locked_until ELSE NULL END AS locked_until, "              \
	"(SELECT count(*) FROM sessions s WHERE s.user_id = users.id AND s.expires_at > strftime('%s','now')) "        \
	"AS sessions FROM users"

static void
h_list(struct req *r)
{
	reply_query(r, 200, USER_COLUMNS " ORDER BY id", 0, NULL, NULL);
}

static void
h_get(struct req *r)
{
	int64_t id = arg_id(r, 0, "user");

	if (id > 0)
		reply_query(r, 200, USER_COLUMNS " WHERE id = ?1", 1, &id, "user");
}

static void
h_create(struct req *r)
{
	static const char *const known[] = { "name", "password", "role", "must_change_password", NULL };
	char err[APP_ERR_LEN], hash[AUTH_HASH_LEN] = "";
	const char *name, *password, *role;
	int64_t id;
	int must_change;
	cJSON *j;

	if ((j = body_object(r)) == NULL)
		return;
	if (fields_known(r, j, known) < 0 || (name = field_str(r, j, "name", 1, 64, NULL)) == NULL ||
	    (password = field_str(r, j, "password", 1, 1024, NULL)) == NULL ||
	    (role = field_str(r, j, "role", 1, 16, NULL)) == NULL ||
	    field_bool(r, j, "must_change_password", 1, &must_change) < 0)
		goto out;
	if (role_parse(role) == 0) {
		reply_error(r, 422, "invalid_field", "role", "role must be admin, operator or viewer");
		goto out;
	}
	/* the route is unlocked: the hash is made first, without the store's
	 * lock; the row is written under it */
	int rc = auth_user_prepare(name, password, role_parse(role), hash, err);
	if (rc != APP_OK) {
		reply_status(r, rc, rc == APP_EINVAL && strstr(err, "password") ? "password" : "name", err);
		goto out;
	}
	pthread_mutex_lock(&r->a->db_mu);
	if (db_begin(r->a->db) != APP_OK) {
		reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
		goto unlock;
	}
	rc = auth_user_insert(r->a->db, name, hash, role_parse(role), r->now, &id, err);
	if (rc == APP_OK && must_change) {
		char sql[96];
		snprintf(sql, sizeof(sql), "UPDATE users SET must_change_password = 1 WHERE id = %lld", (long long)id);
		rc = db_exec(r->a->db, sql, err);
	}
	if (rc == APP_OK && db_commit(r->a->db) != APP_OK)
		rc = app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(r->a->db));
	if (rc != APP_OK) {
		db_rollback(r->a->db);
		reply_status(r, rc, rc == APP_EINVAL && strstr(err, "password") ? "password" : "name", err);
		goto unlock;
	}
	cJSON *d = cJSON_CreateObject();
	cJSON_AddStringToObject(d, "role", role);
	req_audit(r, "user.create", name, "ok", d);
	reply_query(r, 201, USER_COLUMNS " WHERE id = ?1", 1, &id, "user");
unlock:
	pthread_mutex_unlock(&r->a->db_mu);
out:
	sodium_memzero(hash, sizeof(hash));
	body_wipe(j);
}

static int
admins_other_than(sqlite3 *db, int64_t id)
{
	sqlite3_stmt *st;
	int n = 0;

	if (sqlite3_prepare_v2(db, "SELECT count(*) FROM users WHERE role = 'admin' AND id != ?", -1, &st, NULL) !=
	    SQLITE_OK)
		return 0;
	sqlite3_bind_int64(st, 1, id);
	if (sqlite3_step(st) == SQLITE_ROW)
		n = sqlite3_column_int(st, 0);
	sqlite3_finalize(st);
	return n;
}

static const char *
user_role(sqlite3 *db, int64_t id, char *buf, size_t size)
{
	sqlite3_stmt *st;
	const char *ret = NULL;

	if (sqlite3_prepare_v2(db, "SELECT role FROM users WHERE id = ?", -1, &st, NULL) != SQLITE_OK)
		return NULL;
	sqlite3_bind_int64(st, 1, id);
	if (sqlite3_step(st) == SQLITE_ROW) {
		snprintf(buf, size, "%s", (const char *)sqlite3_column_text(st, 0));
		ret = buf;
	}
	sqlite3_finalize(st);
	return ret;
}

static void
h_update(struct req *r)
{
	static const char *const known[] = {
		"role", "password", "unlock", "must_change_password", "revoke_tokens", NULL
	};
	char err[APP_ERR_LEN], cur[16];
	const char *role, *password;
	int unlock, must_change, revoke_tokens, ended = 0;
	int64_t id = arg_id(r, 0, "user");
	cJSON *j, *revoked = NULL;

	if (id < 0 || (j = body_object(r)) == NULL)
		return;
	if (fields_known(r, j, known) < 0 || (role = field_str(r, j, "role", 0, 16, NULL), r->status) ||
	    (password = field_str(r, j, "password", 0, 1024, NULL), r->status) ||
	    field_bool(r, j, "unlock", 0, &unlock) < 0 ||
	    field_bool(r, j, "must_change_password", id != r->who.user_id, &must_change) < 0 ||
	    field_bool(r, j, "revoke_tokens", 1, &revoke_tokens) < 0)
		goto out;
	if (password == NULL && (cJSON_GetObjectItemCaseSensitive(j, "must_change_password") != NULL ||
				 cJSON_GetObjectItemCaseSensitive(j, "revoke_tokens") != NULL)) {
		reply_error(r, 422, "invalid_field", "password",
			    "must_change_password and revoke_tokens go with a "
			    "new password");
		goto out;
	}
	if (user_role(r->a->db, id, cur, sizeof(cur)) == NULL) {
		reply_error(r, 404, "not_found", NULL, "no user %lld", (long long)id);
		goto out;
	}
	if (role != NULL && role_parse(role) == 0) {
		reply_error(r, 422, "invalid_field", "role", "role must be admin, operator or viewer");
		goto out;
	}
	if (role != NULL && strcmp(cur, "admin") == 0 && strcmp(role, "admin") != 0 &&
	    admins_other_than(r->a->db, id) == 0) {
		reply_error(r, 409, "last_admin", "role", "user %lld is the last admin", (long long)id);
		goto out;
	}
	if (db_begin(r->a->db) != 0) {
		reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
		goto out;
	}
	int rc = APP_OK;
	if (password != NULL &&
	    ((rc = auth_user_set_password(r->a->db, id, password, must_change, err)) != APP_OK ||
	     (rc = auth_end_access(r->a->db, id, id == r->who.user_id ? session_cookie(r) : NULL, revoke_tokens, r->now,
				   "an admin set a new password", &ended, &revoked, err)) != APP_OK)) {
		db_rollback(r->a->db);
		reply_status(r, rc, "password", err);
		goto out;
	}
	sqlite3_stmt *st;
	if (sqlite3_prepare_v2(r->a->db,
			       "UPDATE users SET role = coalesce(?1, role), "
			       "failed_logins = CASE WHEN ?2 THEN 0 ELSE failed_logins END, "
			       "locked_until = CASE WHEN ?2 THEN 0 ELSE locked_until END WHERE id = ?3",
			       -1, &st, NULL) == SQLITE_OK) {
		if (role != NULL)
			sqlite3_bind_text(st, 1, role, -1, SQLITE_TRANSIENT);
		sqlite3_bind_int(st, 2, unlock);
		sqlite3_bind_int64(st, 3, id);
		rc = sqlite3_step(st) == SQLITE_DONE ? APP_OK : APP_EIO;
		sqlite3_finalize(st);
	} else {
		rc = APP_EIO;
	}
	/* a new role ends the user's sessions (a token's power follows the
	 * role at each request) */
	if (rc == APP_OK && role != NULL && password == NULL)
		rc = auth_end_access(r->a->db, id, NULL, 0, r->now, NULL, &ended, NULL, err);
	if (rc != APP_OK || db_commit(r->a->db) != 0) {
		reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
		db_rollback(r->a->db);
		goto out;
	}
	cJSON *d = cJSON_CreateObject();
	if (role != NULL)
		cJSON_AddStringToObject(d, "role", role);
	cJSON_AddBoolToObject(d, "password_changed", password != NULL);
	if (password != NULL) {
		cJSON_AddBoolToObject(d, "must_change_password", must_change);
		cJSON_AddItemToObject(d, "tokens_revoked", revoked);
		revoked = NULL;
	}
	cJSON_AddNumberToObject(d, "sessions_ended", ended);
	cJSON_AddBoolToObject(d, "unlocked", unlock);
	char target[32];
	snprintf(target, sizeof(target), "user/%lld", (long long)id);
	req_audit(r, "user.update", target, "ok", d);
	reply_query(r, 200, USER_COLUMNS " WHERE id = ?1", 1, &id, "user");
out:
	cJSON_Delete(revoked);
	body_wipe(j);
}

static void
h_delete(struct req *r)
{
	char cur[16], target[32];
	int64_t id = arg_id(r, 0, "user");

	if (id < 0)
		return;
	if (user_role(r->a->db, id, cur, sizeof(cur)) == NULL) {
		reply_error(r, 404, "not_found", NULL, "no user %lld", (long long)id);
		return;
	}
	if (id == r->who.user_id) {
		reply_error(r, 409, "self", NULL, "you cannot remove your own account");
		return;
	}
	if (strcmp(cur, "admin") == 0 && admins_other_than(r->a->db, id) == 0) {
		reply_error(r, 409, "last_admin", NULL, "user %lld is the last admin", (long long)id);
		return;
	}
	if (db_delete_id(r->a->db, "users", id) < 0) {
		reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
		return;
	}
	snprintf(target, sizeof(target), "user/%lld", (long long)id);
	req_audit(r, "user.delete", target, "ok", NULL);
	reply_empty(r, 204);
}

const struct route api_users_routes[] = {
	{ "GET", "/api/v1/users", ROLE_ADMIN, 0, h_list, NULL, NULL },
	{ "POST", "/api/v1/users", ROLE_ADMIN, ROUTE_UNLOCKED, h_create, NULL, "user.create" },
	{ "GET", "/api/v1/users/{id}", ROLE_ADMIN, 0, h_get, NULL, NULL },
	{ "PATCH", "/api/v1/users/{id}", ROLE_ADMIN, 0, h_update, NULL, "user.update" },
	{ "DELETE", "/api/v1/users/{id}", ROLE_ADMIN, 0, h_delete, NULL, "user.delete" },
	{ NULL, NULL, 0, 0, NULL, NULL, NULL },
};
