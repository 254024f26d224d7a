/*
 * Scheduled backups of the store (backup/backups.h).  Each is named
 * privai-auto-YYYYmmdd-HHMMSS.db (UTC), so the names order them and say
 * when the next is due: backup_every_hours after the newest one, or after
 * the admin started when there is none.  After each, only the newest
 * backup_keep scheduled ones stay; backups made by hand or uploaded are
 * never removed here.  A backup that fails is in the audit log and the
 * admin's log with the reason, and is tried again an hour later.
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
#include "log.h"
#include "backup/backups.h"
#include "store/db.h"
#include "store/settings.h"
#include "store/tasks.h"
#include "worker.h"

#define AUTO_PREFIX "privai-auto-"
#define SCHED_MAX_WAIT_S 300 /* settings are read again at least this often */
#define SCHED_RETRY_S 3600
#define SCHED_MAX_FILES 2048

struct backup_sched {
	struct admin *a;
	struct worker w;
	int64_t retry_at; /* after a failure: not before then */
};

static int
by_name(const void *x, const void *y)
{
	return strcmp(*(char *const *)x, *(char *const *)y);
}

/* The scheduled backups' names in dir, oldest first (caller frees). */
static int
list_auto(const char *dir, char ***ret)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char **names = NULL;
	int n = 0;

	*ret = NULL;
	if (d == NULL)
		return 0;
	while ((e = readdir(d)) != NULL && n < SCHED_MAX_FILES) {
		size_t len = strlen(e->d_name);
		if (strncmp(e->d_name, AUTO_PREFIX, strlen(AUTO_PREFIX)) != 0 || len < 4 ||
		    strcmp(e->d_name + len - 3, ".db") != 0)
			continue;
		char **grown = realloc(names, (size_t)(n + 1) * sizeof(*names));
		if (grown == NULL || (grown[n] = strdup(e->d_name)) == NULL) {
			names = grown != NULL ? grown : names;
			break;
		}
		names = grown;
		n++;
	}
	closedir(d);
	if (n > 1) /* names is NULL when there are none, which qsort may not take */
		qsort(names, (size_t)n, sizeof(*names), by_name);
	*ret = names;
	return n;
}

/* When the backup called name was made, from its name; -1 if not one of ours. */
static int64_t
made_at(const char *name)
{
	struct tm tm;

	memset(&tm, 0, sizeof(tm));
	const char *rest = strptime(name + strlen(AUTO_PREFIX), "%Y%m%d-%H%M%S", &tm);
	return rest != NULL && (*rest == '.' || *rest == '-') ? (int64_t)timegm(&tm) : APP_EFORMAT;
}

static void
free_names(char **names, int n)
{
	for (int i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

static void
prune(struct admin *a, const char *dir, long keep)
{
	char **names, path[4400];
	int n = list_auto(dir, &names);

	for (int i = 0; i < n - keep; i++) {
		if (str_fmt(path, sizeof(path), "%s/%s", dir, names[i]) == APP_OK && unlink(path) == 0) {
			pthread_mutex_lock(&a->db_mu);
			admin_audit(a->db, admin_now(), "system", "backup.delete", names[i], NULL, "ok",
				    "{\"why\":\"past backup_keep\"}");
			pthread_mutex_unlock(&a->db_mu);
		}
	}
	free_names(names, n);
}

static void
make_backup(struct backup_sched *s, const char *dir, int64_t now)
{
	struct admin *a = s->a;
	char name[64] = "", path[4400] = "", err[APP_ERR_LEN] = "";
	int rc = APP_OK;

	if (mkdir(dir, 0700) != 0 && errno != EEXIST)
		rc = app_fail(err, APP_EIO, "cannot create %s: %s", dir, strerror(errno));
	else if (backup_new_name(dir, "privai-auto", now, name, sizeof(name), path, sizeof(path)) != APP_OK)
		rc = app_fail(err, APP_ERANGE, "no name for a backup in %s", dir);
	pthread_mutex_lock(&a->db_mu);
	char ref[100];
	snprintf(ref, sizeof(ref), "backup:%s", name[0] ? name : "scheduled");
	task_begin(a->db, "backup.create", ref, name[0] ? name : "scheduled backup", "system", now);
	if (rc == APP_OK)
		rc = db_backup(a->db, path, err);
	task_finish(a->db, ref, rc == APP_OK, rc == APP_OK ? "written (scheduled)" : err, now);
	cJSON *d = cJSON_CreateObject();
	cJSON_AddBoolToObject(d, "scheduled", 1);
	if (rc != APP_OK)
		cJSON_AddStringToObject(d, "error", err);
	char *detail = cJSON_PrintUnformatted(d);
	cJSON_Delete(d);
	admin_audit(a->db, now, "system", "backup.create", name, NULL, rc == APP_OK ? "ok" : "failed", detail);
	pthread_mutex_unlock(&a->db_mu);
	free(detail);
	if (rc != APP_OK) {
		log_error("scheduled backup %s failed: %s; tried again in an hour", name, err);
		unlink(path);
		s->retry_at = now + SCHED_RETRY_S;
	}
}

/* Back up if due, keep the newest; seconds until the next look. */
static int64_t
tick(struct backup_sched *s)
{
	struct admin *a = s->a;
	char every_s[16], keep_s[16], dir[4096], **names;
	int64_t now = admin_now();

	pthread_mutex_lock(&a->db_mu);
	settings_get(a->db, "backup_every_hours", every_s, sizeof(every_s));
	settings_get(a->db, "backup_keep", keep_s, sizeof(keep_s));
	pthread_mutex_unlock(&a->db_mu);
	long every = strtol(every_s, NULL, 10), keep = strtol(keep_s, NULL, 10);
	if (backups_dir(a, dir, sizeof(dir)) != APP_OK) {
		log_error("the backup directory's path is too long; no scheduled backups");
		return SCHED_MAX_WAIT_S;
	}
	if (every <= 0) {
		prune(a, dir, keep);
		return SCHED_MAX_WAIT_S;
	}
	int n = list_auto(dir, &names);
	int64_t last = n > 0 ? made_at(names[n - 1]) : -1;
	free_names(names, n);
	int64_t due = (last > 0 ? last : a->started_at) + (int64_t)every * 3600;
	if (now >= due && now >= s->retry_at) {
		make_backup(s, dir, now);
		due = now + (int64_t)every * 3600;
	}
	prune(a, dir, keep);
	int64_t wait = (now < s->retry_at ? s->retry_at : due) - now;
	return wait < 1 ? 1 : wait > SCHED_MAX_WAIT_S ? SCHED_MAX_WAIT_S : wait;
}

static void *
sched_main(void *arg)
{
	struct backup_sched *s = arg;

	while (worker_wait(&s->w, tick(s)))
		;
	return NULL;
}

int
backup_sched_start(struct admin *a, char *err)
{
	struct backup_sched *s = calloc(1, sizeof(*s));

	if (s == NULL)
		return app_fail(err, APP_ENOMEM, "out of memory");
	s->a = a;
	if (worker_start(&s->w, sched_main, s) != 0) {
		free(s);
		return app_fail(err, APP_EIO, "cannot start the backup scheduler thread");
	}
	a->backup_sched = s;
	return APP_OK;
}

void
backup_sched_kick(struct admin *a)
{
	if (a->backup_sched != NULL)
		worker_kick(&a->backup_sched->w);
}

void
backup_sched_stop(struct admin *a)
{
	if (a->backup_sched == NULL)
		return;
	worker_stop(&a->backup_sched->w);
	free(a->backup_sched);
	a->backup_sched = NULL;
}
