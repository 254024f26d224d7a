/*
 * Backups of the store: made online with sqlite's backup API into
 * STATE/backups, listed, downloaded, deleted, uploaded from elsewhere
 * (streamed, then checked like a restore would check it), and restored
 * from (db_restore checks the file before anything is replaced).
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "status.h"
#include "strfmt.h"
#include "admin.h"
#include "store/db.h"
#include "http/httpd.h"
#include "store/tasks.h"
#include "backup/backups.h"
#include "models/models.h"
#include "http/spool.h"
#include "deploy/supervisor.h"

#define BACKUP_MAX_BYTES ((int64_t)8 << 30)

/* Backups live in STATE/backups under names this code chose or checked:
 * letters, digits, '.', '_', '-', ending in .db, never starting with '.'. */
static int
backup_name_ok(const char *s)
{
	size_t n = strlen(s);

	if (n < 4 || n > 100 || s[0] == '.' || strcmp(s + n - 3, ".db") != 0)
		return 0;
	return strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == n;
}

/* STATE/backups, made if need be; a reply and an error code when it
 * cannot be. */
static int
backups_dir_made(struct req *r, char *dir, size_t size)
{
	if (backups_dir(r->a, dir, size) != APP_OK) {
		reply_error(r, 500, "internal", NULL, "the backup directory's path is too long");
		return APP_ERANGE;
	}
	if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
		reply_error(r, 500, "internal", NULL, "cannot create %s: %s", dir, strerror(errno));
		return APP_EIO;
	}
	return APP_OK;
}

static void
h_backup_create(struct req *r)
{
	char dir[4096], path[4300], name[64], err[APP_ERR_LEN];
	struct stat sb;

	if (backups_dir_made(r, dir, sizeof(dir)) != APP_OK)
		return;
	int rc = backup_new_name(dir, "privai", r->now, name, sizeof(name), path, sizeof(path));
	if (rc != APP_OK) {
		reply_status(r, rc, NULL,
			     "no name for the backup: its path is too long, or a hundred were made this second");
		return;
	}
	char ref[100];
	snprintf(ref, sizeof(ref), "backup:%s", name);
	task_begin(r->a->db, "backup.create", ref, name, r->who.name, r->now);
	rc = db_backup(r->a->db, path, err);
	task_finish(r->a->db, ref, rc == APP_OK, rc == APP_OK ? "written" : err, r->now);
	if (rc != APP_OK) {
		reply_status(r, rc, NULL, err);
		return;
	}
	req_audit(r, "backup.create", name, "ok", NULL);
	stat(path, &sb);
	cJSON *root = cJSON_CreateObject();
	cJSON_AddStringToObject(root, "name", name);
	cJSON_AddNumberToObject(root, "size_bytes", (double)sb.st_size);
	cJSON_AddNumberToObject(root, "created_at", (double)r->now);
	reply_json(r, 201, root);
}

static void
h_backup_list(struct req *r)
{
	char dir[4096], path[4400];
	cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "data");
	DIR *d;
	struct dirent *e;
	struct stat sb;

	if (backups_dir(r->a, dir, sizeof(dir)) == APP_OK && (d = opendir(dir)) != NULL) {
		while ((e = readdir(d)) != NULL) {
			if (!backup_name_ok(e->d_name) ||
			    str_fmt(path, sizeof(path), "%s/%s", dir, e->d_name) != APP_OK || stat(path, &sb) != 0 ||
			    !S_ISREG(sb.st_mode))
				continue;
			cJSON *o = cJSON_CreateObject();
			cJSON_AddStringToObject(o, "name", e->d_name);
			cJSON_AddNumberToObject(o, "size_bytes", (double)sb.st_size);
			cJSON_AddNumberToObject(o, "created_at", (double)sb.st_mtime);
			cJSON_AddItemToArray(arr, o);
		}
		closedir(d);
	}
	reply_json(r, 200, root);
}

/* The backup named in the path, or -1 after a 404. */
static int
backup_path(struct req *r, const char *name, char *path, size_t size)
{
	char dir[4096];
	struct stat sb;

	if (backups_dir(r->a, dir, sizeof(dir)) != APP_OK || !backup_name_ok(name) ||
	    str_fmt(path, size, "%s/%s", dir, name) != APP_OK || stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) {
		reply_error(r, 404, "not_found", "name", "no backup named '%.100s'", name);
		return APP_ENOTFOUND;
	}
	return 0;
}

static void
h_backup_download(struct req *r)
{
	char path[4300], disp[200];

	if (backup_path(r, r->arg[0], path, sizeof(path)) < 0)
		return;
	struct MHD_Response *resp = file_response(r, path, r->arg[0]);
	if (resp == NULL)
		return;
	snprintf(disp, sizeof(disp), "attachment; filename=\"%s\"", r->arg[0]);
	MHD_add_response_header(resp, "Content-Disposition", disp);
	req_audit(r, "backup.download", r->arg[0], "ok", NULL);
	reply_response(r, 200, resp, "application/vnd.sqlite3");
}

static void
h_backup_delete(struct req *r)
{
	char path[4300];

	if (backup_path(r, r->arg[0], path, sizeof(path)) < 0)
		return;
	if (unlink(path) != 0) {
		reply_error(r, 500, "internal", NULL, "cannot remove %s: %s", r->arg[0], strerror(errno));
		return;
	}
	req_audit(r, "backup.delete", r->arg[0], "ok", NULL);
	reply_empty(r, 204);
}

static void
h_restore(struct req *r)
{
	static const char *const known[] = { "name", NULL };
	char path[4300], err[APP_ERR_LEN];
	const char *name;
	cJSON *j;

	if ((j = body_object(r)) == NULL)
		return;
	if (fields_known(r, j, known) < 0 || (name = field_str(r, j, "name", 1, 100, NULL)) == NULL ||
	    backup_path(r, name, path, sizeof(path)) < 0) {
		cJSON_Delete(j);
		return;
	}
	int rc = db_restore(r->a->db, path, err);
	/* written after: a restore replaces the store, tasks too */
	char ref[140];
	snprintf(ref, sizeof(ref), "restore:%s", name);
	task_begin(r->a->db, "backup.restore", ref, name, r->who.name, r->now);
	task_finish(r->a->db, ref, rc == APP_OK, rc == APP_OK ? "the store was replaced by the backup" : err, r->now);
	if (rc != APP_OK) {
		reply_status(r, rc, "name", err);
	} else {
		/* the audit row goes into the restored database, so the log
		 * says when it was replaced and by whom */
		req_audit(r, "backup.restore", name, "ok", NULL);
		if (r->a->sup != NULL)
			supervisor_kick(r->a->sup);
		reply_empty(r, 204);
	}
	cJSON_Delete(j);
}

/* POST /api/v1/system/backups/upload[?sha256=HEX]: a backup made
 * elsewhere (another appliance, an archive) streamed in, checked as a
 * restore would check it, and kept as privai-upload-*.db beside the
 * others; restoring it is a separate, deliberate step. */
static void
backup_upload_begin(struct req *r)
{
	char dir[4096];

	if (backups_dir_made(r, dir, sizeof(dir)) != APP_OK)
		return;
	upload_begin_in(r, dir, BACKUP_MAX_BYTES);
}

static void
backup_upload_end(struct req *r)
{
	struct upload *u;
	char hex[65], dir[4096], name[64], path[4300], err[APP_ERR_LEN];

	if ((u = upload_finish(r, hex)) == NULL)
		return;
	if (db_check_file(u->sp.tmp, err) != APP_OK) {
		/* the message names our temporary file; the client knows it as "the upload" */
		size_t n = strlen(u->sp.tmp);
		const char *rest = strncmp(err, u->sp.tmp, n) == 0 ? err + n : NULL;
		reply_error(r, 422, "bad_file", NULL, "not a privai backup: %s%s", rest != NULL ? "the upload" : "",
			    rest != NULL ? rest : err);
	} else {
		if (backups_dir(r->a, dir, sizeof(dir)) != APP_OK ||
		    backup_new_name(dir, "privai-upload", r->now, name, sizeof(name), path, sizeof(path)) != APP_OK) {
			reply_error(r, 500, "internal", NULL, "no name for the backup");
		} else if (spool_commit(&u->sp, path, err) != 0) {
			reply_error(r, 500, "internal", NULL, "%s", err);
		} else {
			cJSON *d = cJSON_CreateObject();
			cJSON_AddNumberToObject(d, "bytes", (double)u->sp.bytes);
			cJSON_AddStringToObject(d, "sha256", hex);
			req_audit(r, "backup.upload", name, "ok", d);
			cJSON *root = cJSON_CreateObject();
			cJSON_AddStringToObject(root, "name", name);
			cJSON_AddNumberToObject(root, "size_bytes", (double)u->sp.bytes);
			cJSON_AddNumberToObject(root, "created_at", (double)r->now);
			cJSON_AddStringToObject(root, "sha256", hex);
			reply_json(r, 201, root);
		}
	}
	upload_discard(r);
}

static const struct stream_ops backup_upload_ops = {
	.begin = backup_upload_begin,
	.data = upload_data,
	.end = backup_upload_end,
	.abort = upload_discard,
};

const struct route api_backups_routes[] = {
	{ "POST", "/api/v1/system/backups/upload", ROLE_ADMIN, ROUTE_STREAM, NULL, &backup_upload_ops,
	  "backup.upload" },
	{ "GET", "/api/v1/system/backups", ROLE_ADMIN, 0, h_backup_list, NULL, NULL },
	{ "POST", "/api/v1/system/backups", ROLE_ADMIN, 0, h_backup_create, NULL, "backup.create" },
	{ "GET", "/api/v1/system/backups/{name}", ROLE_ADMIN, 0, h_backup_download, NULL, "backup.download" },
	{ "DELETE", "/api/v1/system/backups/{name}", ROLE_ADMIN, 0, h_backup_delete, NULL, "backup.delete" },
	{ "POST", "/api/v1/system/restore", ROLE_ADMIN, 0, h_restore, NULL, "backup.restore" },
	{ NULL, NULL, 0, 0, NULL, NULL, NULL },
};
