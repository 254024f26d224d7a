/*
 * Backups of the store in STATE/backups: made on request (api/backups.c)
 * or on a schedule (backup/schedule.c).
 */
#ifndef PRIVAI_ADMIN_BACKUPS_H
#define PRIVAI_ADMIN_BACKUPS_H

#include <stddef.h>
#include <stdint.h>

struct admin;

/* STATE/backups; APP_ERANGE when it does not fit. */
int backups_dir(struct admin *a, char *out, size_t size);
/* PREFIX-YYYYmmdd-HHMMSS.db (UTC) in dir, with -N when that is taken
 * (two in one second): the name and its path.  APP_OK, APP_ERANGE when
 * they do not fit, APP_EBUSY after a hundred taken. */
int backup_new_name(const char *dir, const char *prefix, int64_t now, char *name, size_t name_size, char *path,
		    size_t path_size);

/* Scheduled backups: every backup_every_hours (a setting; 0: none) after
 * the newest scheduled one (or the admin's start), named privai-auto-*,
 * the newest backup_keep of them kept.  Start the thread, tell it a
 * setting changed, stop it (waits). */
int backup_sched_start(struct admin *a, char *err);
void backup_sched_kick(struct admin *a);
void backup_sched_stop(struct admin *a);

#endif
