/* First-start contents of the store. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "status.h"
#include "strfmt.h"
#include "admin.h"
#include "log.h"
#include "auth/auth.h"
#include "store/db.h"
#include "deploy/deployments.h"
#include "models/models.h"
#include "seed.h"

static int
count(sqlite3 *db, const char *sql)
{
	sqlite3_stmt *st;
	int n = -1;

	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		return APP_EIO;
	if (sqlite3_step(st) == SQLITE_ROW)
		n = sqlite3_column_int(st, 0);
	sqlite3_finalize(st);
	return n;
}

/* Hand a generated password to whoever started us, never to a log. */
static int
tell_password(struct admin *a, const char *password, char *err)
{
	char path[4096 + 64];
	int fd;

	if (isatty(STDERR_FILENO)) {
		log_info("first start: user 'admin', one-time password %s (change it after logging in)", password);
		return APP_OK;
	}
	if (str_fmt(path, sizeof(path), "%s/%s", a->cfg.state_dir, SEED_PASSWORD_FILE) != APP_OK)
		return app_fail(err, APP_ERANGE, "the state directory's path is too long: %s", a->cfg.state_dir);
	unlink(path); /* a stale one from a store that was thrown away */
	if ((fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600)) < 0)
		return app_fail(err, APP_EIO, "cannot create %s: %s", path, strerror(errno));
	size_t n = strlen(password);
	int ok = write(fd, password, n) == (ssize_t)n && write(fd, "\n", 1) == 1 && fsync(fd) == 0;
	close(fd);
	if (!ok) {
		unlink(path);
		return app_fail(err, APP_EIO, "cannot write %s: %s", path, strerror(errno));
	}
	log_info("first start: user 'admin' has a one-time password in %s (readable by this "
		 "account only; it is removed when the password is changed)",
		 path);
	return APP_OK;
}

static int
first_admin(struct admin *a, char *err)
{
	const char *file = getenv("PRIVAI_ADMIN_PASSWORD_FILE");
	char password[AUTH_MAX_PASSWORD + 2], msg[APP_ERR_LEN];
	int64_t id;
	int rc, generated = 0;

	if (file != NULL) {
		FILE *fp = fopen(file, "re");
		if (fp == NULL || fgets(password, sizeof(password), fp) == NULL) {
			if (fp != NULL)
				fclose(fp);
			return app_fail(err, APP_EIO, "PRIVAI_ADMIN_PASSWORD_FILE %s: cannot read a line", file);
		}
		fclose(fp);
		password[strcspn(password, "\r\n")] = '\0';
	} else {
		auth_new_password(password, sizeof(password));
		generated = 1;
	}
	/* one transaction: a start that fails to hand the password over
	 * leaves no account behind that nobody can sign in to */
	if (db_begin(a->db) != 0) {
		sodium_memzero(password, sizeof(password));
		return app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(a->db));
	}
	rc = auth_user_create(a->db, "admin", password, ROLE_ADMIN, admin_now(), &id, msg);
	if (rc != APP_OK && file != NULL)
		app_fail(err, rc, "PRIVAI_ADMIN_PASSWORD_FILE %s: %s", file, msg);
	else if (rc != APP_OK)
		app_fail(err, rc, "%s", msg);
	if (rc == APP_OK && generated)
		rc = db_exec(a->db, "UPDATE users SET must_change_password = 1 WHERE name = 'admin'", err);
	if (rc == APP_OK)
		admin_audit(a->db, admin_now(), "system", "user.create", "admin", "", "ok", "{\"first_start\":true}");
	if (rc == APP_OK && generated)
		rc = tell_password(a, password, err);
	sodium_memzero(password, sizeof(password));
	if (rc == APP_OK && db_commit(a->db) != 0)
		rc = app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(a->db));
	if (rc != APP_OK)
		db_rollback(a->db);
	return rc;
}

static int
demo(struct admin *a, const char *path, char *err)
{
	char real[PATH_MAX], key[DEPLOY_KEY_LEN];
	struct model_meta m;
	struct stat sb;
	sqlite3_stmt *st;
	int64_t model_id, dep_id, key_id;
	int rc;

	if (realpath(path, real) == NULL || stat(real, &sb) != 0)
		return app_fail(err, APP_EIO, "--demo-model %s: %s", path, strerror(errno));
	if ((rc = model_meta_read(real, &m, err)) != APP_OK)
		return rc;
	if (db_begin(a->db) != 0) {
		model_meta_free(&m);
		return app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(a->db));
	}
	rc = model_insert(a->db, "demo", real, "path", (int64_t)sb.st_size, NULL, &m, 0, admin_now(), &model_id, err);
	/* a model without a template of its own chats in ChatML */
	const char *options = m.chat_template == NULL ? "{\"chat_template\":\"chatml\"}" : "{}";
	int port = rc == APP_OK ? deploy_pick_port(a) : -1;
	if (rc == APP_OK && port < 0)
		rc = app_fail(err, APP_EBUSY, "no free engine port for the demo deployment");
	if (rc == APP_OK) {
		rc = app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(a->db));
		if (sqlite3_prepare_v2(a->db,
				       "INSERT INTO deployments (name, model_id, placement, options, port, state, "
				       "created_at, updated_at) VALUES ('demo', ?1, "
				       "'{\"kind\":\"cpu\",\"threads\":0}', "
				       "?4, ?2, 'pending', ?3, ?3)",
				       -1, &st, NULL) == SQLITE_OK) {
			sqlite3_bind_int64(st, 1, model_id);
			sqlite3_bind_text(st, 4, options, -1, SQLITE_STATIC);
			sqlite3_bind_int(st, 2, port);
			sqlite3_bind_int64(st, 3, admin_now());
			if (sqlite3_step(st) == SQLITE_DONE)
				rc = APP_OK;
			sqlite3_finalize(st);
		}
	}
	model_meta_free(&m);
	dep_id = sqlite3_last_insert_rowid(a->db);
	if (rc == APP_OK)
		rc = deploy_key_create(a->db, dep_id, "demo", admin_now(), key, &key_id, err);
	if (rc != APP_OK || db_commit(a->db) != 0) {
		db_rollback(a->db);
		return rc != APP_OK ? rc : app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(a->db));
	}
	admin_audit(a->db, admin_now(), "system", "deployment.create", "demo", "", "ok", "{\"first_start\":true}");
	log_info("first start: model 'demo' deployed on CPU; OpenAI endpoint "
		 "http://127.0.0.1:%d/v1 with API key %s",
		 port, key);
	return APP_OK;
}

int
seed_first_start(struct admin *a, const char *demo_model, const char *day0_models, char *err)
{
	int rc;

	if (count(a->db, "SELECT count(*) FROM users") == 0 && (rc = first_admin(a, err)) != APP_OK)
		return rc;
	if (demo_model != NULL && count(a->db, "SELECT count(*) FROM models") == 0 &&
	    (rc = demo(a, demo_model, err)) != APP_OK)
		return rc;
	seed_day0_models(a, day0_models);
	return APP_OK;
}

/* A model name from a file name ending in .gguf: what model_name_ok
 * allows, anything else '_'. */
static void
name_from_path(const char *path, char *out, size_t size)
{
	const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	size_t n = strlen(base) - 5; /* ".gguf" */

	if (n >= size)
		n = size - 1;
	for (size_t i = 0; i < n; i++) {
		/* model_name_ok's rule, one character at a time ('.' and '-' are
		 * refused only in first place) */
		char one[2] = { base[i], '\0' };
		out[i] = model_name_ok(one) || (i > 0 && (base[i] == '.' || base[i] == '-')) ? base[i] : '_';
	}
	out[n] = '\0';
	if (n == 0)
		snprintf(out, size, "model");
}

static int
day0_one(struct admin *a, const char *path, char *name, size_t nsize, char *err)
{
	char real[PATH_MAX], base[100];
	struct model_meta m;
	struct stat sb;
	sqlite3_stmt *st;
	int64_t id;
	size_t len = strlen(path);
	int rc, known = 0;

	if (path[0] != '/' || len < 6 || strcmp(path + len - 5, ".gguf") != 0)
		return app_fail(err, APP_EINVAL, "not an absolute path to a .gguf file");
	if (realpath(path, real) == NULL || stat(real, &sb) != 0)
		return app_fail(err, APP_EINVAL, "%s", strerror(errno));
	if (!S_ISREG(sb.st_mode))
		return app_fail(err, APP_EINVAL, "not a regular file");
	if (sqlite3_prepare_v2(a->db, "SELECT count(*) FROM models WHERE path = ?1", -1, &st, NULL) != SQLITE_OK)
		return app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(a->db));
	sqlite3_bind_text(st, 1, real, -1, SQLITE_TRANSIENT);
	if (sqlite3_step(st) == SQLITE_ROW)
		known = sqlite3_column_int(st, 0);
	sqlite3_finalize(st);
	if (known)
		return 0;
	if ((rc = model_meta_read(real, &m, err)) != APP_OK)
		return rc;
	name_from_path(path, base, sizeof(base)); /* the name given: real may be a link's target */
	snprintf(name, nsize, "%s", base);
	/* a name taken (by a model or an upload's reservation): the next one */
	for (int i = 2; (rc = model_insert(a->db, name, real, "path", (int64_t)sb.st_size, NULL, &m, 0, admin_now(),
					   &id, err)) == APP_EBUSY &&
			i < 100;
	     i++)
		snprintf(name, nsize, "%s-%d", base, i);
	model_meta_free(&m);
	return rc == APP_OK ? 1 : rc;
}

int
seed_day0_models(struct admin *a, const char *list)
{
	char buf[4096], name[128], err[APP_ERR_LEN], detail[PATH_MAX + APP_ERR_LEN + 64];
	int n = 0;

	if (list == NULL || snprintf(buf, sizeof(buf), "%s", list) >= (int)sizeof(buf))
		return 0;
	for (char *save = NULL, *p = strtok_r(buf, ",", &save); p != NULL; p = strtok_r(NULL, ",", &save)) {
		while (*p == ' ')
			p++;
		cJSON *d = cJSON_CreateObject();
		cJSON_AddStringToObject(d, "path", p);
		cJSON_AddBoolToObject(d, "day0", 1);
		int rc = day0_one(a, p, name, sizeof(name), err);
		if (rc < 0)
			cJSON_AddStringToObject(d, "error", err);
		char *dt = cJSON_PrintUnformatted(d);
		snprintf(detail, sizeof(detail), "%s", dt != NULL ? dt : "{}");
		free(dt);
		cJSON_Delete(d);
		if (rc < 0) {
			log_warn("day-0 model %s: not registered: %s", p, err);
			admin_audit(a->db, admin_now(), "system", "model.create", p, "", "refused", detail);
		} else if (rc == 1) {
			log_info("day-0 model %s registered as '%s'", p, name);
			admin_audit(a->db, admin_now(), "system", "model.create", name, "", "ok", detail);
			n++;
		}
	}
	return n;
}
