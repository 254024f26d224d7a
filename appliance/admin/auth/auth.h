/*
 * Who may do what: local users with Argon2id password hashes, login with
 * rate limiting and lockout, browser sessions (cookie + CSRF token), and
 * bearer API tokens (shown once, stored hashed, scoped, expiring,
 * revocable).  Secrets are random from libsodium and only their SHA-256
 * is stored, so a copy of the database logs nobody in.
 */
#ifndef PRIVAI_ADMIN_AUTH_H
#define PRIVAI_ADMIN_AUTH_H

#include <cjson/cJSON.h>
#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

#include "store/db.h" /* DB_CHECKED */

enum role { ROLE_VIEWER = 1, ROLE_OPERATOR = 2, ROLE_ADMIN = 3 };

const char *role_name(enum role r);
/* 0 when the name is not a role. */
enum role role_parse(const char *name);

#define AUTH_MAX_FAILURES 5 /* failed logins before a lockout */
#define AUTH_LOCKOUT_SECONDS 300
#define AUTH_SESSION_SECONDS (12 * 3600)
#define AUTH_SECRET_LEN 64     /* room for any token text + NUL */
#define AUTH_MIN_PASSWORD 12   /* characters (code points), the one rule: API, OpenAPI, console */
#define AUTH_MAX_PASSWORD 1024 /* bytes */

struct principal {
	int64_t user_id;
	char name[65];
	enum role role;
	int64_t token_id;           /* 0 for a session */
	int64_t token_expires;      /* tokens: when it stops working (0: never) */
	int must_change;            /* the account still has a one-time password */
	char csrf[AUTH_SECRET_LEN]; /* sessions only */
};

/* The password rule: at least AUTH_MIN_PASSWORD characters, at most
 * AUTH_MAX_PASSWORD bytes of UTF-8, not the user's name.  APP_EINVAL
 * with the reason. */
int auth_password_check(const char *name, const char *password, char *err);

/* Create a user; APP_EINVAL names a bad name, role or short password,
 * APP_EBUSY a name already taken. */
int auth_user_create(sqlite3 *db, const char *name, const char *password, enum role role, int64_t now, int64_t *ret_id,
		     char *err);
/* auth_user_create in two steps, so the Argon2 hash (~130 ms) is made
 * without the store's lock: prepare checks name, role and password and
 * hashes (no store); insert writes the row (APP_EBUSY: the name is taken). */
#define AUTH_HASH_LEN 128
int auth_user_prepare(const char *name, const char *password, enum role role, char *ret_hash, char *err);
DB_CHECKED int auth_user_insert(sqlite3 *db, const char *name, const char *hash, enum role role, int64_t now,
				int64_t *ret_id, char *err);
/* A new password; must_change marks it one-time (the user must choose
 * another before anything else).  Sessions and tokens are left alone:
 * auth_end_access() ends them. */
int auth_user_set_password(sqlite3 *db, int64_t user_id, const char *password, int must_change, char *err);
/* The same with a hash made by auth_user_prepare (no Argon2 here). */
DB_CHECKED int auth_user_set_hash(sqlite3 *db, int64_t user_id, const char *hash, int must_change, char *err);
/* After a password change: end every session of user_id except the one
 * whose cookie is keep_cookie (NULL: all), and when revoke_tokens, revoke
 * every live API token of the account with `reason`.  *ret_sessions is
 * the number of sessions ended; *ret_tokens (may be NULL) receives a new
 * array of the revoked tokens' ids, the caller frees it. */
int auth_end_access(sqlite3 *db, int64_t user_id, const char *keep_cookie, int revoke_tokens, int64_t now,
		    const char *reason, int *ret_sessions, cJSON **ret_tokens, char *err);

/* Check name and password; on success a new session: the cookie value
 * (returned once) and its CSRF token.  A wrong password counts towards a
 * lockout; a locked account is refused even with the right password.
 * APP_EINVAL (bad credentials, one message for unknown name and wrong
 * password) or APP_EBUSY (locked, with the seconds left). */
int auth_login(sqlite3 *db, const char *name, const char *password, const char *remote_addr, int64_t now,
	       char *ret_cookie, struct principal *ret, char *err);

/*
 * auth_login in three steps, so the Argon2 check (about 130 ms, and 64 MiB)
 * runs without the store's lock, which every other request waits on:
 *
 *   lock;   auth_login_lookup(db, ...)          the user, its hash, its lockout
 *   unlock; auth_login_verify(&la, password)    Argon2, the same work for an
 *                                               unknown or locked user
 *   lock;   auth_login_finish(db, &la, ...)     the outcome, counted against the
 *                                               row as it is now; a session
 *
 * auth_login_finish reads the row again: a password changed, an account
 * locked or removed meanwhile wins over the check made before.
 */
struct login_attempt {
	int known; /* the name is a user */
	int64_t user_id;
	char hash[128]; /* crypto_pwhash_STRBYTES; "" for an unknown name */
	int matched;    /* set by auth_login_verify */
};
int auth_login_lookup(sqlite3 *db, const char *name, const char *password, struct login_attempt *ret, char *err);
void auth_login_verify(struct login_attempt *la, const char *password);
int auth_login_finish(sqlite3 *db, struct login_attempt *la, const char *remote_addr, int64_t now, char *ret_cookie,
		      struct principal *ret, char *err);
/* The session behind a cookie value; APP_ENOTFOUND if none or expired. */
int auth_session(sqlite3 *db, const char *cookie, int64_t now, struct principal *ret);
/* End the session behind a cookie value: APP_OK, APP_ENOTFOUND when there
 * is none, APP_EIO when the store refused (the session still stands). */
DB_CHECKED int auth_logout(sqlite3 *db, const char *cookie);
/* 1 while the user's password is one-time (0 also when there is no such user). */
int auth_must_change(sqlite3 *db, int64_t user_id);
/* The user who owns token id, APP_ENOTFOUND when there is none, APP_EIO. */
int64_t auth_token_owner(sqlite3 *db, int64_t token_id);

/* The highest role a token's scopes allow: "read" viewer, "write"
 * operator, "admin" admin; 0 when empty or any word is not a scope. */
enum role scope_role(const char *scopes);

/* A new API token for user_id: the text (returned once) and its row id.
 * parent_token_id is the token it was made with (0: made in a session);
 * such a token stops working when its parent does. */
int auth_token_create(sqlite3 *db, int64_t user_id, int64_t parent_token_id, const char *name, const char *scopes,
		      int64_t expires_at, int64_t now, char *ret_token, int64_t *ret_id, char *err);
/* Revoke a token and every token made with it, with the reason stored. */
int auth_token_revoke(sqlite3 *db, int64_t token_id, int64_t now, const char *reason, char *err);
/* The user behind a bearer token; APP_ENOTFOUND if unknown, revoked or
 * expired, or if a token it was made with is (then err says which, for
 * the audit log). */
int auth_token(sqlite3 *db, const char *token, int64_t now, struct principal *ret, char *err);

/* A new secret: prefix + 43 url-safe base64 characters of 32 random
 * bytes (out holds AUTH_SECRET_LEN); and its SHA-256 in hex (65 bytes). */
void auth_new_secret(const char *prefix, char *out);
void auth_secret_hex(const char *secret, char *hex);

/* A generated password: 20 url-safe characters of 120 random bits (out
 * holds at least AUTH_NEW_PASSWORD_LEN + 1). */
#define AUTH_NEW_PASSWORD_LEN 20
void auth_new_password(char *out, size_t size);

/* Constant-time comparison of a presented CSRF token with the session's. */
int auth_csrf_ok(const struct principal *p, const char *presented);

#endif
