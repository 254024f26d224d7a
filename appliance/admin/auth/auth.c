/* Users, passwords, sessions and API tokens on the admin store. */
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "status.h"
#include "log.h"
#include "auth/auth.h"
#include "store/db.h"

#define RAW_SECRET 32
#define TOKEN_USE_GRAIN_S 60 /* last_used_at is kept to the minute */

const char *
role_name(enum role r)
{
	switch (r) {
	case ROLE_VIEWER:
		return "viewer";
	case ROLE_OPERATOR:
		return "operator";
	case ROLE_ADMIN:
		return "admin";
	}
	return "?";
}

enum role
role_parse(const char *name)
{
	if (name == NULL)
		return 0;
	if (strcmp(name, "viewer") == 0)
		return ROLE_VIEWER;
	if (strcmp(name, "operator") == 0)
		return ROLE_OPERATOR;
	if (strcmp(name, "admin") == 0)
		return ROLE_ADMIN;
	return 0;
}

enum role
scope_role(const char *scopes)
{
	enum role best = 0;
	const char *p = scopes;

	if (p == NULL)
		return 0;
	while (*p != '\0') {
		size_t n = strcspn(p, " ");
		enum role r = n == 4 && strncmp(p, "read", 4) == 0    ? ROLE_VIEWER
			      : n == 5 && strncmp(p, "write", 5) == 0 ? ROLE_OPERATOR
			      : n == 5 && strncmp(p, "admin", 5) == 0 ? ROLE_ADMIN
								      : (enum role) - 1;
		if (r == (enum role) - 1)
			return 0;
		if (r > best)
			best = r;
		p += n;
		while (*p == ' ')
			p++;
	}
	return best;
}

static int
sql_fail(sqlite3 *db, char *err)
{
	return app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(db));
}

void
auth_new_secret(const char *prefix, char *out)
{
	unsigned char raw[RAW_SECRET];
	size_t n = strlen(prefix);

	randombytes_buf(raw, sizeof(raw));
	memcpy(out, prefix, n);
	sodium_bin2base64(out + n, AUTH_SECRET_LEN - n, raw, sizeof(raw), sodium_base64_VARIANT_URLSAFE_NO_PADDING);
	sodium_memzero(raw, sizeof(raw));
}

void
auth_new_password(char *out, size_t size)
{
	unsigned char raw[15];

	randombytes_buf(raw, sizeof(raw));
	sodium_bin2base64(out, size, raw, sizeof(raw), sodium_base64_VARIANT_URLSAFE_NO_PADDING);
	sodium_memzero(raw, sizeof(raw));
}

static void
secret_hash(const char *secret, unsigned char *out)
{
	crypto_hash_sha256(out, (const unsigned char *)secret, strlen(secret));
}

void
auth_secret_hex(const char *secret, char *hex)
{
	unsigned char h[crypto_hash_sha256_BYTES];

	secret_hash(secret, h);
	sodium_bin2hex(hex, 65, h, sizeof(h));
}

static int
valid_name(const char *s)
{
	size_t n = s != NULL ? strlen(s) : 0;

	if (n < 1 || n > 64)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
		      c == '_' || c == '-' || c == '@'))
			return 0;
	}
	return 1;
}

/* Characters, not bytes: "Passwörter" is as long as it looks. */
static size_t
utf8_chars(const char *s)
{
	size_t n = 0;

	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		n += (*p & 0xc0) != 0x80;
	return n;
}

int
auth_password_check(const char *name, const char *password, char *err)
{
	if (password == NULL || utf8_chars(password) < AUTH_MIN_PASSWORD)
		return app_fail(err, APP_EINVAL, "a password needs at least %d characters", AUTH_MIN_PASSWORD);
	if (strlen(password) > AUTH_MAX_PASSWORD)
		return app_fail(err, APP_EINVAL, "a password may have at most %d bytes", AUTH_MAX_PASSWORD);
	if (name != NULL && strcasecmp(password, name) == 0)
		return app_fail(err, APP_EINVAL, "a password must not be the user's name");
	return APP_OK;
}

static int
hash_password(const char *name, const char *password, char *out, char *err)
{
	int r;

	if ((r = auth_password_check(name, password, err)) != APP_OK)
		return r;
	if (crypto_pwhash_str_alg(out, password, strlen(password), crypto_pwhash_OPSLIMIT_INTERACTIVE,
				  crypto_pwhash_MEMLIMIT_INTERACTIVE, crypto_pwhash_ALG_ARGON2ID13) != 0)
		return app_fail(err, APP_ENOMEM, "out of memory hashing a password");
	return APP_OK;
}

int
auth_user_prepare(const char *name, const char *password, enum role role, char *ret_hash, char *err)
{
	_Static_assert(AUTH_HASH_LEN >= crypto_pwhash_STRBYTES, "an Argon2 hash fits");
	if (sodium_init() < 0)
		return app_fail(err, APP_EIO, "libsodium failed to initialise");
	if (!valid_name(name))
		return app_fail(err, APP_EINVAL, "a user name is 1-64 letters, digits, '.', '_', '-' or '@'");
	if (role_parse(role_name(role)) != role)
		return app_fail(err, APP_EINVAL, "unknown role");
	return hash_password(name, password, ret_hash, err);
}

int
auth_user_create(sqlite3 *db, const char *name, const char *password, enum role role, int64_t now, int64_t *ret_id,
		 char *err)
{
	char hash[AUTH_HASH_LEN];
	int r;

	if ((r = auth_user_prepare(name, password, role, hash, err)) == APP_OK)
		r = auth_user_insert(db, name, hash, role, now, ret_id, err);
	sodium_memzero(hash, sizeof(hash));
	return r;
}

int
auth_user_insert(sqlite3 *db, const char *name, const char *hash, enum role role, int64_t now, int64_t *ret_id,
		 char *err)
{
	sqlite3_stmt *st;

	if (sqlite3_prepare_v2(db, "INSERT INTO users (name, password_hash, role, created_at) VALUES (?, ?, ?, ?)", -1,
			       &st, NULL) != SQLITE_OK)
		return sql_fail(db, err);
	sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 2, hash, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 3, role_name(role), -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 4, now);
	int rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc == SQLITE_CONSTRAINT)
		return app_fail(err, APP_EBUSY, "a user named '%s' exists", name);
	if (rc != SQLITE_DONE)
		return sql_fail(db, err);
	if (ret_id != NULL)
		*ret_id = sqlite3_last_insert_rowid(db);
	return APP_OK;
}

int
auth_user_set_password(sqlite3 *db, int64_t user_id, const char *password, int must_change, char *err)
{
	char hash[crypto_pwhash_STRBYTES], name[65] = "";
	sqlite3_stmt *st;
	int r;

	if (sqlite3_prepare_v2(db, "SELECT name FROM users WHERE id = ?", -1, &st, NULL) != SQLITE_OK)
		return sql_fail(db, err);
	sqlite3_bind_int64(st, 1, user_id);
	if (sqlite3_step(st) == SQLITE_ROW)
		snprintf(name, sizeof(name), "%s", (const char *)sqlite3_column_text(st, 0));
	sqlite3_finalize(st);
	if (name[0] == '\0')
		return app_fail(err, APP_ENOTFOUND, "no user %lld", (long long)user_id);
	if ((r = hash_password(name, password, hash, err)) < 0)
		return r;
	r = auth_user_set_hash(db, user_id, hash, must_change, err);
	sodium_memzero(hash, sizeof(hash));
	return r;
}

int
auth_user_set_hash(sqlite3 *db, int64_t user_id, const char *hash, int must_change, char *err)
{
	sqlite3_stmt *st;

	if (sqlite3_prepare_v2(db, "UPDATE users SET password_hash = ?, must_change_password = ? WHERE id = ?", -1, &st,
			       NULL) != SQLITE_OK)
		return sql_fail(db, err);
	sqlite3_bind_text(st, 1, hash, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int(st, 2, must_change != 0);
	sqlite3_bind_int64(st, 3, user_id);
	int rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE)
		return sql_fail(db, err);
	return sqlite3_changes(db) == 1 ? APP_OK : app_fail(err, APP_ENOTFOUND, "no user %lld", (long long)user_id);
}

int
auth_end_access(sqlite3 *db, int64_t user_id, const char *keep_cookie, int revoke_tokens, int64_t now,
		const char *reason, int *ret_sessions, cJSON **ret_tokens, char *err)
{
	unsigned char keep[crypto_hash_sha256_BYTES];
	sqlite3_stmt *st;
	cJSON *ids = NULL;
	int rc;

	memset(keep, 0, sizeof(keep)); /* no cookie hashes to all zeroes */
	if (keep_cookie != NULL)
		secret_hash(keep_cookie, keep);
	if (sqlite3_prepare_v2(db, "DELETE FROM sessions WHERE user_id = ? AND token_hash != ?", -1, &st, NULL) !=
	    SQLITE_OK)
		return sql_fail(db, err);
	sqlite3_bind_int64(st, 1, user_id);
	sqlite3_bind_blob(st, 2, keep, sizeof(keep), SQLITE_TRANSIENT);
	rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE)
		return sql_fail(db, err);
	int ended = sqlite3_changes(db);
	if (ret_tokens != NULL && (ids = cJSON_CreateArray()) == NULL)
		return app_fail(err, APP_ENOMEM, "out of memory");
	if (revoke_tokens) {
		if (sqlite3_prepare_v2(db,
				       "UPDATE api_tokens SET revoked_at = ?1, revoked_reason = ?2 WHERE user_id = ?3 "
				       "AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?1) RETURNING "
				       "id",
				       -1, &st, NULL) != SQLITE_OK) {
			cJSON_Delete(ids);
			return sql_fail(db, err);
		}
		sqlite3_bind_int64(st, 1, now);
		sqlite3_bind_text(st, 2, reason, -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(st, 3, user_id);
		while ((rc = sqlite3_step(st)) == SQLITE_ROW)
			if (ids != NULL)
				cJSON_AddItemToArray(ids, cJSON_CreateNumber((double)sqlite3_column_int64(st, 0)));
		sqlite3_finalize(st);
		if (rc != SQLITE_DONE) {
			cJSON_Delete(ids);
			return sql_fail(db, err);
		}
	}
	*ret_sessions = ended;
	if (ret_tokens != NULL)
		*ret_tokens = ids;
	return APP_OK;
}

/* Spend the same effort for an unknown name as for a wrong password, so
 * the time taken does not say which names exist. */
static char dummy_hash[crypto_pwhash_STRBYTES];
static pthread_once_t dummy_once = PTHREAD_ONCE_INIT;

static void
make_dummy(void)
{
	if (crypto_pwhash_str_alg(dummy_hash, "not a password", 14, crypto_pwhash_OPSLIMIT_INTERACTIVE,
				  crypto_pwhash_MEMLIMIT_INTERACTIVE, crypto_pwhash_ALG_ARGON2ID13) != 0)
		dummy_hash[0] = '\0';
}

static void
verify_dummy(const char *password)
{
	pthread_once(&dummy_once, make_dummy);
	if (dummy_hash[0] != '\0' && crypto_pwhash_str_verify(dummy_hash, password, strlen(password)) == 0)
		return; /* "not a password" was tried: still a failure to the caller */
}

static int
note_failure(sqlite3 *db, int64_t id, int failed, int64_t now)
{
	sqlite3_stmt *st;
	int lock = failed + 1 >= AUTH_MAX_FAILURES;

	if (sqlite3_prepare_v2(db, "UPDATE users SET failed_logins = ?, locked_until = ? WHERE id = ?", -1, &st,
			       NULL) != SQLITE_OK)
		return APP_EIO;
	sqlite3_bind_int(st, 1, lock ? 0 : failed + 1);
	sqlite3_bind_int64(st, 2, lock ? now + AUTH_LOCKOUT_SECONDS : 0);
	sqlite3_bind_int64(st, 3, id);
	int rc = sqlite3_step(st);
	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? APP_OK : APP_EIO;
}

static int
new_session(sqlite3 *db, struct principal *p, const char *remote_addr, int64_t now, char *cookie, char *err)
{
	unsigned char h[crypto_hash_sha256_BYTES];
	sqlite3_stmt *st;

	auth_new_secret("s_", cookie);
	auth_new_secret("", p->csrf);
	secret_hash(cookie, h);
	if (sqlite3_prepare_v2(db,
			       "INSERT INTO sessions (token_hash, csrf_token, user_id, created_at, expires_at, "
			       "remote_addr) "
			       "VALUES (?, ?, ?, ?, ?, ?)",
			       -1, &st, NULL) != SQLITE_OK)
		return sql_fail(db, err);
	sqlite3_bind_blob(st, 1, h, sizeof(h), SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 2, p->csrf, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(st, 3, p->user_id);
	sqlite3_bind_int64(st, 4, now);
	sqlite3_bind_int64(st, 5, now + AUTH_SESSION_SECONDS);
	sqlite3_bind_text(st, 6, remote_addr ? remote_addr : "", -1, SQLITE_TRANSIENT);
	int rc = sqlite3_step(st);
	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? APP_OK : sql_fail(db, err);
}

int
auth_login_lookup(sqlite3 *db, const char *name, const char *password, struct login_attempt *ret, char *err)
{
	sqlite3_stmt *st;

	memset(ret, 0, sizeof(*ret));
	if (sodium_init() < 0)
		return app_fail(err, APP_EIO, "libsodium failed to initialise");
	if (name == NULL || password == NULL || strlen(password) > 1024)
		return app_fail(err, APP_EINVAL, "wrong user name or password");
	if (sqlite3_prepare_v2(db, "SELECT id, password_hash FROM users WHERE name = ?", -1, &st, NULL) != SQLITE_OK)
		return sql_fail(db, err);
	sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
	if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 1) != NULL &&
	    (size_t)sqlite3_column_bytes(st, 1) < sizeof(ret->hash)) {
		ret->known = 1;
		ret->user_id = sqlite3_column_int64(st, 0);
		memcpy(ret->hash, sqlite3_column_text(st, 1), (size_t)sqlite3_column_bytes(st, 1) + 1);
	}
	sqlite3_finalize(st);
	return APP_OK;
}

void
auth_login_verify(struct login_attempt *la, const char *password)
{
	_Static_assert(sizeof(la->hash) >= crypto_pwhash_STRBYTES, "an Argon2 hash fits");
	if (!la->known) {
		verify_dummy(password); /* an unknown name takes as long as a wrong password */
		la->matched = 0;
		return;
	}
	la->matched = crypto_pwhash_str_verify(la->hash, password, strlen(password)) == 0;
}

int
auth_login_finish(sqlite3 *db, struct login_attempt *la, const char *remote_addr, int64_t now, char *ret_cookie,
		  struct principal *ret, char *err)
{
	sqlite3_stmt *st;

	if (!la->known)
		return app_fail(err, APP_EINVAL, "wrong user name or password");
	/* the row as it is now: the check above was made without the lock */
	if (sqlite3_prepare_v2(db,
			       "SELECT id, name, password_hash, role, failed_logins, locked_until FROM users "
			       "WHERE id = ?",
			       -1, &st, NULL) != SQLITE_OK)
		return sql_fail(db, err);
	sqlite3_bind_int64(st, 1, la->user_id);
	if (sqlite3_step(st) != SQLITE_ROW) {
		sqlite3_finalize(st);
		return app_fail(err, APP_EINVAL, "wrong user name or password"); /* removed meanwhile */
	}
	memset(ret, 0, sizeof(*ret));
	ret->user_id = sqlite3_column_int64(st, 0);
	snprintf(ret->name, sizeof(ret->name), "%s", (const char *)sqlite3_column_text(st, 1));
	int same_hash =
		sqlite3_column_text(st, 2) != NULL && strcmp((const char *)sqlite3_column_text(st, 2), la->hash) == 0;
	ret->role = role_parse((const char *)sqlite3_column_text(st, 3));
	int failed = sqlite3_column_int(st, 4);
	int64_t locked_until = sqlite3_column_int64(st, 5);
	sqlite3_finalize(st);
	if (locked_until > now)
		return app_fail(err, APP_EBUSY, "the account is locked for %lld more seconds after %d failed logins",
				(long long)(locked_until - now), AUTH_MAX_FAILURES);
	if (!la->matched || !same_hash) { /* a password changed meanwhile: the old one no longer opens it */
		if (note_failure(db, ret->user_id, failed, now) < 0)
			return sql_fail(db, err);
		return app_fail(err, APP_EINVAL, "wrong user name or password");
	}
	if (failed > 0 && note_failure(db, ret->user_id, -1, now) < 0) /* back to 0 */
		return sql_fail(db, err);
	return new_session(db, ret, remote_addr, now, ret_cookie, err);
}

int
auth_login(sqlite3 *db, const char *name, const char *password, const char *remote_addr, int64_t now, char *ret_cookie,
	   struct principal *ret, char *err)
{
	struct login_attempt la;
	int rc;

	if ((rc = auth_login_lookup(db, name, password, &la, err)) != APP_OK)
		return rc;
	auth_login_verify(&la, password);
	rc = auth_login_finish(db, &la, remote_addr, now, ret_cookie, ret, err);
	sodium_memzero(&la, sizeof(la));
	return rc;
}

int
auth_session(sqlite3 *db, const char *cookie, int64_t now, struct principal *ret)
{
	unsigned char h[crypto_hash_sha256_BYTES];
	sqlite3_stmt *st;
	int r = APP_ENOTFOUND;

	if (cookie == NULL || strlen(cookie) >= AUTH_SECRET_LEN)
		return APP_ENOTFOUND;
	secret_hash(cookie, h);
	if (sqlite3_prepare_v2(db,
			       "SELECT u.id, u.name, u.role, s.csrf_token, u.must_change_password "
			       "FROM sessions s JOIN users u "
			       "ON u.id = s.user_id WHERE s.token_hash = ? AND s.expires_at > ?",
			       -1, &st, NULL) != SQLITE_OK)
		return APP_EIO;
	sqlite3_bind_blob(st, 1, h, sizeof(h), SQLITE_TRANSIENT);
	sqlite3_bind_int64(st, 2, now);
	if (sqlite3_step(st) == SQLITE_ROW) {
		memset(ret, 0, sizeof(*ret));
		ret->user_id = sqlite3_column_int64(st, 0);
		snprintf(ret->name, sizeof(ret->name), "%s", (const char *)sqlite3_column_text(st, 1));
		ret->role = role_parse((const char *)sqlite3_column_text(st, 2));
		snprintf(ret->csrf, sizeof(ret->csrf), "%s", (const char *)sqlite3_column_text(st, 3));
		ret->must_change = sqlite3_column_int(st, 4) != 0;
		r = APP_OK;
	}
	sqlite3_finalize(st);
	return r;
}

int
auth_logout(sqlite3 *db, const char *cookie)
{
	unsigned char h[crypto_hash_sha256_BYTES];
	sqlite3_stmt *st;

	if (cookie == NULL)
		return APP_ENOTFOUND;
	secret_hash(cookie, h);
	if (sqlite3_prepare_v2(db, "DELETE FROM sessions WHERE token_hash = ?", -1, &st, NULL) != SQLITE_OK)
		return APP_EIO;
	sqlite3_bind_blob(st, 1, h, sizeof(h), SQLITE_TRANSIENT);
	int rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE)
		return APP_EIO; /* the session still stands */
	return sqlite3_changes(db) == 1 ? APP_OK : APP_ENOTFOUND;
}

int
auth_token_create(sqlite3 *db, int64_t user_id, int64_t parent_token_id, const char *name, const char *scopes,
		  int64_t expires_at, int64_t now, char *ret_token, int64_t *ret_id, char *err)
{
	unsigned char h[crypto_hash_sha256_BYTES];
	sqlite3_stmt *st;

	if (sodium_init() < 0)
		return app_fail(err, APP_EIO, "libsodium failed to initialise");
	if (!valid_name(name))
		return app_fail(err, APP_EINVAL, "a token name is 1-64 letters, digits, '.', '_', '-' or '@'");
	if (expires_at != 0 && expires_at <= now)
		return app_fail(err, APP_EINVAL, "the expiry is in the past");
	if (scope_role(scopes) == 0)
		return app_fail(err, APP_EINVAL, "scopes are one or more of read, write, admin (space separated)");
	auth_new_secret("pat_", ret_token);
	secret_hash(ret_token, h);
	if (sqlite3_prepare_v2(db,
			       "INSERT INTO api_tokens (name, token_hash, user_id, scopes, created_at, expires_at, "
			       "parent_token_id) VALUES (?, ?, ?, ?, ?, ?, ?)",
			       -1, &st, NULL) != SQLITE_OK)
		return sql_fail(db, err);
	sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
	sqlite3_bind_blob(st, 2, h, sizeof(h), SQLITE_TRANSIENT);
	sqlite3_bind_int64(st, 3, user_id);
	sqlite3_bind_text(st, 4, scopes, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(st, 5, now);
	if (expires_at != 0)
		sqlite3_bind_int64(st, 6, expires_at);
	else
		sqlite3_bind_null(st, 6);
	if (parent_token_id > 0)
		sqlite3_bind_int64(st, 7, parent_token_id);
	else
		sqlite3_bind_null(st, 7);
	int rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc == SQLITE_CONSTRAINT)
		return app_fail(err, APP_ENOTFOUND, "no user %lld or token %lld", (long long)user_id,
				(long long)parent_token_id);
	if (rc != SQLITE_DONE)
		return sql_fail(db, err);
	if (ret_id != NULL)
		*ret_id = sqlite3_last_insert_rowid(db);
	return APP_OK;
}

int
auth_token_revoke(sqlite3 *db, int64_t token_id, int64_t now, const char *reason, char *err)
{
	sqlite3_stmt *st;

	if (sqlite3_prepare_v2(db,
			       "UPDATE api_tokens SET revoked_at = ?, revoked_reason = ? WHERE id = ? AND "
			       "revoked_at IS NULL",
			       -1, &st, NULL) != SQLITE_OK)
		return sql_fail(db, err);
	sqlite3_bind_int64(st, 1, now);
	sqlite3_bind_text(st, 2, reason, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(st, 3, token_id);
	int rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE)
		return sql_fail(db, err);
	if (sqlite3_changes(db) != 1)
		return app_fail(err, APP_ENOTFOUND, "no active token %lld", (long long)token_id);
	/* and everything made with it, however deep */
	if (sqlite3_prepare_v2(db,
			       "WITH RECURSIVE kin(id) AS (SELECT id FROM api_tokens WHERE parent_token_id = ?1 "
			       "UNION SELECT t.id FROM api_tokens t JOIN kin ON t.parent_token_id = kin.id) "
			       "UPDATE api_tokens SET revoked_at = ?2, revoked_reason = 'token ' || ?1 || ' it was "
			       "made with was revoked' WHERE id IN kin AND revoked_at IS NULL",
			       -1, &st, NULL) != SQLITE_OK)
		return sql_fail(db, err);
	sqlite3_bind_int64(st, 1, token_id);
	sqlite3_bind_int64(st, 2, now);
	rc = sqlite3_step(st);
	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? APP_OK : sql_fail(db, err);
}

/* A token made with another works only while every token up its chain
 * does: revocation cascades when it happens, and this check catches a
 * chain changed behind our back (a restored backup, a hand-edited row). */
static int
token_ancestors_live(sqlite3 *db, int64_t token_id, int64_t now, char *err)
{
	sqlite3_stmt *st;
	int r = APP_OK;

	if (sqlite3_prepare_v2(db,
			       "WITH RECURSIVE up(id, parent, revoked, expires, depth) AS ("
			       "SELECT id, parent_token_id, revoked_at, expires_at, 0 FROM api_tokens WHERE id = ?1 "
			       "UNION ALL SELECT t.id, t.parent_token_id, t.revoked_at, t.expires_at, up.depth + 1 "
			       "FROM api_tokens t JOIN up ON t.id = up.parent WHERE up.depth < 64) "
			       "SELECT id, revoked IS NOT NULL FROM up WHERE depth > 0 AND (revoked IS NOT NULL OR "
			       "(expires IS NOT NULL AND expires <= ?2)) LIMIT 1",
			       -1, &st, NULL) != SQLITE_OK)
		return sql_fail(db, err);
	sqlite3_bind_int64(st, 1, token_id);
	sqlite3_bind_int64(st, 2, now);
	if (sqlite3_step(st) == SQLITE_ROW)
		r = app_fail(err, APP_ENOTFOUND, "token %lld was made with token %lld, which %s", (long long)token_id,
			     (long long)sqlite3_column_int64(st, 0),
			     sqlite3_column_int(st, 1) ? "was revoked" : "expired");
	sqlite3_finalize(st);
	return r;
}

int
auth_token(sqlite3 *db, const char *token, int64_t now, struct principal *ret, char *err)
{
	unsigned char h[crypto_hash_sha256_BYTES];
	sqlite3_stmt *st;
	int64_t last_used = 0, parent = 0;
	int r;

	if (token == NULL || strlen(token) >= AUTH_SECRET_LEN)
		return app_fail(err, APP_ENOTFOUND, "unknown token");
	secret_hash(token, h);
	if (sqlite3_prepare_v2(db,
			       "SELECT t.id, u.id, u.name, u.role, t.expires_at, t.revoked_at, t.scopes, "
			       "coalesce(t.last_used_at, 0), u.must_change_password, t.parent_token_id "
			       "FROM api_tokens t JOIN users u ON u.id = t.user_id "
			       "WHERE t.token_hash = ?",
			       -1, &st, NULL) != SQLITE_OK)
		return sql_fail(db, err);
	sqlite3_bind_blob(st, 1, h, sizeof(h), SQLITE_TRANSIENT);
	if (sqlite3_step(st) != SQLITE_ROW) {
		r = app_fail(err, APP_ENOTFOUND, "unknown token");
	} else if (sqlite3_column_type(st, 5) != SQLITE_NULL) {
		r = app_fail(err, APP_ENOTFOUND, "token %lld was revoked", (long long)sqlite3_column_int64(st, 0));
	} else if (sqlite3_column_type(st, 4) != SQLITE_NULL && sqlite3_column_int64(st, 4) <= now) {
		r = app_fail(err, APP_ENOTFOUND, "token %lld expired", (long long)sqlite3_column_int64(st, 0));
	} else {
		memset(ret, 0, sizeof(*ret));
		ret->token_id = sqlite3_column_int64(st, 0);
		ret->user_id = sqlite3_column_int64(st, 1);
		snprintf(ret->name, sizeof(ret->name), "%s", (const char *)sqlite3_column_text(st, 2));
		ret->role = role_parse((const char *)sqlite3_column_text(st, 3));
		enum role cap = scope_role((const char *)sqlite3_column_text(st, 6));
		if (cap < ret->role) /* a token never does more than its scopes say */
			ret->role = cap;
		last_used = sqlite3_column_int64(st, 7);
		ret->must_change = sqlite3_column_int(st, 8) != 0;
		ret->token_expires = sqlite3_column_int64(st, 4); /* NULL reads as 0: never */
		parent = sqlite3_column_int64(st, 9);
		r = APP_OK;
	}
	sqlite3_finalize(st);
	if (r == APP_OK && ret->role == 0)
		r = app_fail(err, APP_ENOTFOUND, "token %lld has no valid scope", (long long)ret->token_id);
	if (r == APP_OK && parent != 0)
		r = token_ancestors_live(db, ret->token_id, now, err);
	/* to the minute: a write (and its fsync) on every request would cost
	 * automation more than the whole proxy does */
	if (r == APP_OK && now - last_used >= TOKEN_USE_GRAIN_S) {
		char q[96], why[APP_ERR_LEN];
		snprintf(q, sizeof(q), "UPDATE api_tokens SET last_used_at = %lld WHERE id = %lld", (long long)now,
			 (long long)ret->token_id);
		/* the token is good either way; only its last use is not kept */
		if (db_exec(db, q, why) != APP_OK)
			log_warn("token %lld: last use not recorded: %s", (long long)ret->token_id, why);
	}
	return r;
}

int
auth_csrf_ok(const struct principal *p, const char *presented)
{
	size_t n = strlen(p->csrf);

	return presented != NULL && n > 0 && strlen(presented) == n && sodium_memcmp(p->csrf, presented, n) == 0;
}

int
auth_must_change(sqlite3 *db, int64_t user_id)
{
	return db_int64(db, "SELECT must_change_password FROM users WHERE id = ?1", user_id, 0) > 0;
}

int64_t
auth_token_owner(sqlite3 *db, int64_t token_id)
{
	return db_int64(db, "SELECT user_id FROM api_tokens WHERE id = ?1", token_id, APP_ENOTFOUND);
}
