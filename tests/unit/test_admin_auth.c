/*
 * Users, logins, lockout, sessions with CSRF tokens, and API tokens on a
 * real store: right and wrong passwords, the same answer for an unknown
 * name, a lockout that holds even for the right password and lifts after
 * its time, secrets stored only as hashes, revoked and expired tokens.
 */
#include <unistd.h>

#include "testlib.h"
#include "status.h"
#include "auth/auth.h"
#include "store/db.h"
#include "dbtestlib.h"

int
main(void)
{
	char dir[] = "/tmp/privai-admin-auth-XXXXXX", path[128], err[APP_ERR_LEN], err2[APP_ERR_LEN];
	char cookie[AUTH_SECRET_LEN], token[AUTH_SECRET_LEN];
	struct principal p, q;
	sqlite3 *db;
	int64_t uid, tid, now = 1800000000;
	char token2[AUTH_SECRET_LEN];

	if (mkdtemp(dir) == NULL)
		return test_summary();
	snprintf(path, sizeof(path), "%s/admin.db", dir);
	if (db_open(path, &db, err) < 0) {
		CHECK(0, "%s", err);
		return test_summary();
	}
	CHECK(auth_user_create(db, "alice", "correct horse battery", ROLE_OPERATOR, now, &uid, err) == 0, "create: %s",
	      err);
	CHECK(auth_user_create(db, "alice", "another password", ROLE_VIEWER, now, NULL, err) == APP_EBUSY &&
		      strstr(err, "exists"),
	      "a taken name: %s", err);
	CHECK(auth_user_create(db, "bob", "short", ROLE_VIEWER, now, NULL, err) == APP_EINVAL && strstr(err, "12"),
	      "a short password: %s", err);
	CHECK(auth_user_create(db, "x'; DROP TABLE users; --", "long enough pw", ROLE_VIEWER, now, NULL, err) ==
		      APP_EINVAL,
	      "SQL in a name is refused as a name: %s", err);
	CHECK(auth_user_create(db, "carol", "long enough pw", (enum role)7, now, NULL, err) == APP_EINVAL, "bad role");
	CHECK(sql_count(db, "SELECT count(*) FROM users WHERE password_hash LIKE '$argon2id$%'") == 1,
	      "Argon2id hash stored");

	/* login, session, CSRF, logout */
	CHECK(auth_login(db, "alice", "correct horse battery", "127.0.0.1", now, cookie, &p, err) == 0, "login: %s",
	      err);
	CHECK(p.role == ROLE_OPERATOR && strcmp(p.name, "alice") == 0 && strlen(cookie) > 40, "principal");
	char sql[256];
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM sessions WHERE token_hash = CAST('%s' AS BLOB) OR csrf_token = '%s'", cookie,
		 cookie);
	CHECK(sql_count(db, sql) == 0 && sql_count(db, "SELECT length(token_hash) FROM sessions") == 32,
	      "the cookie itself is not stored, only its hash");
	CHECK(auth_session(db, cookie, now + 60, &q) == 0 && q.user_id == uid && q.role == ROLE_OPERATOR, "session");
	CHECK(auth_csrf_ok(&q, p.csrf) && !auth_csrf_ok(&q, "nope") && !auth_csrf_ok(&q, NULL), "CSRF check");
	CHECK(auth_session(db, cookie, now + AUTH_SESSION_SECONDS + 1, &q) == APP_ENOTFOUND, "sessions expire");
	CHECK(auth_session(db, "s_forged", now, &q) == APP_ENOTFOUND, "a forged cookie");
	CHECK(auth_logout(db, cookie) == 0 && auth_session(db, cookie, now, &q) == APP_ENOTFOUND, "logout");

	/* wrong password vs unknown user: one message */
	CHECK(auth_login(db, "alice", "wrong password!", "127.0.0.1", now, cookie, &p, err) == APP_EINVAL,
	      "wrong password");
	CHECK(auth_login(db, "mallory", "wrong password!", "127.0.0.1", now, cookie, &p, err2) == APP_EINVAL &&
		      strcmp(err, err2) == 0,
	      "an unknown name gets the same answer: %s / %s", err, err2);
	/* lockout after AUTH_MAX_FAILURES, holding for the right password */
	for (int i = 1; i < AUTH_MAX_FAILURES; i++)
		auth_login(db, "alice", "wrong password!", "127.0.0.1", now, cookie, &p, err);
	CHECK(auth_login(db, "alice", "correct horse battery", "127.0.0.1", now + 1, cookie, &p, err) == APP_EBUSY &&
		      strstr(err, "locked"),
	      "locked after %d failures: %s", AUTH_MAX_FAILURES, err);
	CHECK(auth_login(db, "alice", "correct horse battery", "127.0.0.1", now + AUTH_LOCKOUT_SECONDS + 1, cookie, &p,
			 err) == 0,
	      "the lockout lifts: %s", err);
	CHECK(sql_count(db, "SELECT failed_logins FROM users WHERE name = 'alice'") == 0,
	      "a good login clears the count");

	/* the login's steps, as the unlocked handler runs them: what changed
	 * in the store between the lookup and the finish wins */
	struct login_attempt la;
	CHECK(auth_login_lookup(db, "alice", "correct horse battery", &la, err) == 0 && la.known, "lookup: %s", err);
	auth_login_verify(&la, "correct horse battery");
	CHECK(la.matched, "the right password matches the hash looked up");
	CHECK(auth_user_set_password(db, uid, "a newer password!", 0, err) == 0, "set: %s", err);
	CHECK(auth_login_finish(db, &la, "127.0.0.1", now + AUTH_LOCKOUT_SECONDS + 2, cookie, &p, err) == APP_EINVAL &&
		      sql_count(db, "SELECT failed_logins FROM users WHERE name = 'alice'") == 1,
	      "a password changed meanwhile: the old one is refused and counted (%s)", err);
	CHECK(auth_login_lookup(db, "alice", "a newer password!", &la, err) == 0, "lookup again");
	auth_login_verify(&la, "a newer password!");
	sql_must(db, "UPDATE users SET locked_until = 9999999999 WHERE name = 'alice'");
	CHECK(auth_login_finish(db, &la, "127.0.0.1", now + AUTH_LOCKOUT_SECONDS + 3, cookie, &p, err) == APP_EBUSY,
	      "an account locked meanwhile is refused: %s", err);
	sql_must(db, "UPDATE users SET locked_until = 0, failed_logins = 0 WHERE name = 'alice'");
	CHECK(auth_login_lookup(db, "nobody", "whatever password", &la, err) == 0 && !la.known, "an unknown name");
	auth_login_verify(&la, "whatever password");
	CHECK(auth_login_finish(db, &la, "127.0.0.1", now, cookie, &p, err) == APP_EINVAL, "is refused at the finish");
	CHECK(auth_user_set_password(db, uid, "correct horse battery", 0, err) == 0, "the test's password again: %s",
	      err);

	/* API tokens */
	CHECK(auth_token_create(db, uid, 0, "ci", "write", now + 3600, now, token, &tid, err) == 0, "token: %s", err);
	CHECK(strncmp(token, "pat_", 4) == 0 &&
		      sql_count(db, "SELECT count(*) FROM api_tokens WHERE length(token_hash) = 32") == 1,
	      "token shown once, stored hashed");
	CHECK(auth_token(db, token, now + 10, &q, err) == 0 && q.user_id == uid && q.token_id == tid, "token works");
	CHECK(q.role == ROLE_OPERATOR, "an operator's write-scoped token acts as operator (role %d)", q.role);
	CHECK(auth_token_create(db, uid, 0, "ro", "read", 0, now, token2, NULL, err) == 0 &&
		      auth_token(db, token2, now, &q, err) == 0 && q.role == ROLE_VIEWER,
	      "a read-scoped token is capped at viewer");
	CHECK(auth_token(db, token, now + 3600, &q, err) == APP_ENOTFOUND && strstr(err, "expired"), "expired: %s",
	      err);
	CHECK(auth_token(db, "pat_forged", now, &q, err) == APP_ENOTFOUND && strstr(err, "unknown"), "forged");
	CHECK(auth_token_revoke(db, tid, now + 20, "test", err) == 0, "revoke");
	CHECK(auth_token(db, token, now + 30, &q, err) == APP_ENOTFOUND && strstr(err, "revoked"), "revoked: %s", err);
	CHECK(auth_token_revoke(db, tid, now + 40, "test", err) == APP_ENOTFOUND, "revoking twice");
	CHECK(auth_token_create(db, uid, 0, "badscope", "models:read", 0, now, token, &tid, err) == APP_EINVAL,
	      "unknown scope refused: %s", err);
	CHECK(auth_token_create(db, uid, 0, "noscope", "", 0, now, token, &tid, err) == APP_EINVAL,
	      "empty scopes refused");
	CHECK(scope_role("read  admin") == ROLE_ADMIN && scope_role("read") == ROLE_VIEWER && scope_role("read x") == 0,
	      "scope words");
	CHECK(auth_token_create(db, uid, 0, "old", "read", now - 1, now, token, &tid, err) == APP_EINVAL,
	      "expiry in the past");
	CHECK(auth_token_create(db, 999, 0, "ghost", "read", 0, now, token, &tid, err) == APP_ENOTFOUND,
	      "no such user: %s", err);

	/* the password rule: characters, not bytes; not the name */
	CHECK(auth_password_check("bob", "elevenchars", err) == APP_EINVAL && strstr(err, "12"), "11 characters");
	CHECK(auth_password_check("bob", "twelve chars", err) == 0, "12 characters: %s", err);
	CHECK(auth_password_check("bob", "\xc3\xa4\xc3\xa4\xc3\xa4\xc3\xa4\xc3\xa4\xc3\xa4", err) == APP_EINVAL,
	      "6 two-byte characters are 6, not 12");
	CHECK(auth_password_check("Longusername", "longusername", err) == APP_EINVAL && strstr(err, "name"),
	      "the user's name as password: %s", err);

	/* a token made with a token: revoked with it, and dead when its
	 * parent is, even if the cascade was undone behind our back */
	int64_t parent, child, grandchild;
	char t_parent[AUTH_SECRET_LEN], t_child[AUTH_SECRET_LEN], t_grand[AUTH_SECRET_LEN];
	CHECK(auth_token_create(db, uid, 0, "parent", "write", now + 7200, now, t_parent, &parent, err) == 0 &&
		      auth_token_create(db, uid, parent, "child", "write", now + 3600, now, t_child, &child, err) ==
			      0 &&
		      auth_token_create(db, uid, child, "grand", "read", now + 3600, now, t_grand, &grandchild, err) ==
			      0,
	      "a chain of tokens: %s", err);
	CHECK(auth_token(db, t_grand, now + 1, &q, err) == 0 && q.token_expires == now + 3600, "the chain works: %s",
	      err);
	CHECK(auth_token_revoke(db, parent, now + 2, "test", err) == 0, "revoke the parent");
	CHECK(auth_token(db, t_child, now + 3, &q, err) == APP_ENOTFOUND &&
		      auth_token(db, t_grand, now + 3, &q, err) == APP_ENOTFOUND,
	      "children and grandchildren die with it");
	CHECK(sql_count(db,
			"SELECT count(*) FROM api_tokens WHERE revoked_reason LIKE '%it was made with was revoked'") ==
		      2,
	      "each says why");
	sql_must(db, "UPDATE api_tokens SET revoked_at = NULL WHERE name IN ('child', 'grand')");
	CHECK(auth_token(db, t_grand, now + 4, &q, err) == APP_ENOTFOUND && strstr(err, "was made with token"),
	      "a live child of a revoked parent is refused: %s", err);

	/* a password change ends other sessions and, when asked, tokens */
	char keep[AUTH_SECRET_LEN], other[AUTH_SECRET_LEN], t_live[AUTH_SECRET_LEN];
	int ended = -1;
	cJSON *ids = NULL;
	CHECK(auth_login(db, "alice", "correct horse battery", "127.0.0.1", now + 1000, keep, &p, err) == 0 &&
		      auth_login(db, "alice", "correct horse battery", "127.0.0.1", now + 1000, other, &p, err) == 0 &&
		      auth_token_create(db, uid, 0, "live", "read", 0, now, t_live, NULL, err) == 0,
	      "two sessions, a token");
	int before = sql_count(db, "SELECT count(*) FROM sessions WHERE user_id = 1");
	CHECK(auth_user_set_password(db, uid, "a brand new password", 0, err) == 0 &&
		      auth_end_access(db, uid, keep, 1, now + 1001, "password changed", &ended, &ids, err) == 0,
	      "%s", err);
	CHECK(before >= 2 && ended == before - 1 && auth_session(db, keep, now + 1002, &q) == 0 &&
		      auth_session(db, other, now + 1002, &q) != 0,
	      "the other session ended, this one kept (%d ended)", ended);
	CHECK(cJSON_GetArraySize(ids) >= 1 && auth_token(db, t_live, now + 1002, &q, err) == APP_ENOTFOUND,
	      "the account's tokens revoked (%d)", cJSON_GetArraySize(ids));
	cJSON_Delete(ids);

	db_close(db);
	snprintf(sql, sizeof(sql), "rm -rf %s", dir);
	if (system(sql) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
	return test_summary();
}
