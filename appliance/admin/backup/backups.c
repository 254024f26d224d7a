/*
 * Where backups live and how a new one is named (backup/backups.h),
 * whoever makes it: an operator's request or the schedule.
 */
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>

#include "status.h"
#include "strfmt.h"
#include "admin.h"
#include "backup/backups.h"

int
backups_dir(struct admin *a, char *out, size_t size)
{
	return str_fmt(out, size, "%s/backups", a->cfg.state_dir);
}

int
backup_new_name(const char *dir, const char *prefix, int64_t now, char *name, size_t name_size, char *path,
		size_t path_size)
{
	struct tm tm;
	time_t t = (time_t)now;
	struct stat sb;
	char stamp[32];

	gmtime_r(&t, &tm);
	strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &tm);
	if (str_fmt(name, name_size, "%s-%s.db", prefix, stamp) != APP_OK ||
	    str_fmt(path, path_size, "%s/%s", dir, name) != APP_OK)
		return APP_ERANGE;
	for (int i = 1; stat(path, &sb) == 0; i++) {
		if (i == 100)
			return APP_EBUSY; /* a hundred in one second: something is wrong */
		if (str_fmt(name, name_size, "%s-%s-%d.db", prefix, stamp, i) != APP_OK ||
		    str_fmt(path, path_size, "%s/%s", dir, name) != APP_OK)
			return APP_ERANGE;
	}
	return APP_OK;
}
