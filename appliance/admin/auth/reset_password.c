/*
 * `privai-admin reset-password USER`: the way back into the console when
 * the one-time password (or every admin's password) is lost.  It runs on
 * the appliance itself, as root, beside a running privai-admin (sqlite's
 * locking keeps the two apart): a new one-time password for USER, the
 * lockout lifted, the account's sessions ended and its API tokens
 * revoked, an audit row.  The password goes to the caller's terminal
 * only.
 */
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "status.h"
#include "store/audit.h"
#include "auth/auth.h"
#include "store/db.h"
#include "auth/reset_password.h"

static int
user_id(sqlite3 *db, const char *name, int64_t *ret_id, char *err)
{
	sqlite3_stmt *st;
	int rc;

	if (sqlite3_prepare_v2(db, "SELECT id FROM users WHERE name = ?", -1, &st, NULL) != SQLITE_OK)
		return app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(db));
	sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW)
		*ret_id = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	if (rc == SQLITE_DONE)
		return app_fail(err, APP_ENOTFOUND, "no user '%s'", name);
	return rc == SQLITE_ROW ? APP_OK : app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(db));
}

int
admin_reset_password(const char *db_path, const char *name, int64_t now, const char *actor, char *ret_password,
		     size_t size, struct reset_result *ret, char *err)
{
	sqlite3 *db = NULL;
	cJSON *revoked = NULL;
	char password[AUTH_NEW_PASSWORD_LEN + 8], detail[160];
	int64_t id = 0;
	int ended = 0, rc;

	if (size < sizeof(password))
		return app_fail(err, APP_EINVAL, "no room for the password");
	if ((rc = db_open(db_path, &db, err)) != APP_OK)
		return rc;
	auth_new_password(password, sizeof(password));
	if (db_begin(db) != 0) {
		rc = app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(db));
		goto out;
	}
	if ((rc = user_id(db, name, &id, err)) != APP_OK ||
	    (rc = auth_user_set_password(db, id, password, 1, err)) != APP_OK ||
	    (rc = auth_end_access(db, id, NULL, 1, now, "its password was reset on the appliance's console", &ended,
				  &revoked, err)) != APP_OK)
		goto rollback;
	/* a lockout would keep the new password out too */
	sqlite3_stmt *st;
	if (sqlite3_prepare_v2(db, "UPDATE users SET failed_logins = 0, locked_until = 0 WHERE id = ?", -1, &st,
			       NULL) != SQLITE_OK) {
		rc = app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(db));
		goto rollback;
	}
	sqlite3_bind_int64(st, 1, id);
	rc = sqlite3_step(st) == SQLITE_DONE ? APP_OK : app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(db));
	sqlite3_finalize(st);
	if (rc != APP_OK)
		goto rollback;
	snprintf(detail, sizeof(detail), "{\"sessions_ended\":%d,\"tokens_revoked\":%d,\"unlocked\":true}", ended,
		 cJSON_GetArraySize(revoked));
	/* an unaudited reset is no reset: the row goes in the same transaction */
	if (audit_write(db, now, actor, "user.password_reset", name, "local console", "ok", detail) != APP_OK ||
	    db_commit(db) != 0) {
		rc = app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(db));
		goto rollback;
	}
	snprintf(ret_password, size, "%s", password);
	ret->sessions_ended = ended;
	ret->tokens_revoked = cJSON_GetArraySize(revoked);
	goto out;
rollback:
	db_rollback(db);
out:
	sodium_memzero(password, sizeof(password));
	cJSON_Delete(revoked);
	db_close(db);
	return rc;
}
