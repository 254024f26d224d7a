/*
 * Where backups live and how a new one is named (backup/backups.h),
 * whoever makes it: an operator's request or the schedule.
 */
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>

#include "admin.h"
#include "backup/backups.h"

void
backups_dir(struct admin *a, char *out, size_t size)
{
	snprintf(out, size, "%s/backups", a->cfg.state_dir);
}

void
backup_new_name(const char *dir, const char *prefix, int64_t now, char *name, size_t name_size, char *path,
		size_t path_size)
{
	struct tm tm;
	time_t t = (time_t)now;
	struct stat sb;
	char stamp[32];

	gmtime_r(&t, &tm);
	strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &tm);
	snprintf(name, name_size, "%s-%s.db", prefix, stamp);
	snprintf(path, path_size, "%s/%s", dir, name);
	for (int i = 1; stat(path, &sb) == 0 && i < 100; i++) {
		snprintf(name, name_size, "%s-%s-%d.db", prefix, stamp, i);
		snprintf(path, path_size, "%s/%s", dir, name);
	}
}
