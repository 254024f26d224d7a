/* Tasks in the store (store/tasks.h). */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "store/tasks.h"

static void
exec_or_log(sqlite3 *db, sqlite3_stmt *st, const char *what)
{
	if (st == NULL || sqlite3_step(st) != SQLITE_DONE)
		log_error("tasks: cannot %s: %s", what, sqlite3_errmsg(db));
	sqlite3_finalize(st);
}

/* "HH:MM:SS line\n" (UTC) */
static void
log_line(char *out, size_t size, int64_t now, const char *line)
{
	time_t t = (time_t)now;
	struct tm tm;
	char hms[16] = "";

	if (gmtime_r(&t, &tm) != NULL)
		strftime(hms, sizeof(hms), "%H:%M:%S", &tm);
	snprintf(out, size, "%s %s\n", hms, line);
}

int64_t
task_begin(sqlite3 *db, const char *kind, const char *ref, const char *target, const char *actor, int64_t now)
{
	sqlite3_stmt *st = NULL;
	int64_t id = -1;
	char first[400];

	if (sqlite3_prepare_v2(db, "SELECT id FROM tasks WHERE ref = ?1 AND state = 'running'", -1, &st, NULL) ==
	    SQLITE_OK) {
		sqlite3_bind_text(st, 1, ref, -1, SQLITE_STATIC);
		if (sqlite3_step(st) == SQLITE_ROW)
			id = sqlite3_column_int64(st, 0);
		sqlite3_finalize(st);
	}
	if (id > 0)
		return id;
	log_line(first, sizeof(first), now, "started");
	st = NULL;
	if (sqlite3_prepare_v2(db,
			       "INSERT INTO tasks (kind, ref, target, actor, state, started_at, log) "
			       "VALUES (?1, ?2, ?3, ?4, 'running', ?5, ?6)",
			       -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_text(st, 1, kind, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 2, ref, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 3, target, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 4, actor, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 5, now);
		sqlite3_bind_text(st, 6, first, -1, SQLITE_STATIC);
	}
	exec_or_log(db, st, "begin a task");
	id = sqlite3_last_insert_rowid(db);
	st = NULL;
	if (sqlite3_prepare_v2(db, "DELETE FROM tasks WHERE state != 'running' AND id <= ?1", -1, &st, NULL) ==
	    SQLITE_OK)
		sqlite3_bind_int64(st, 1, id - TASKS_KEEP);
	exec_or_log(db, st, "drop old tasks");
	return id;
}

/* Append line to the running task's log, keeping its newest bytes. */
static void
append(sqlite3 *db, const char *ref, const char *line, int64_t now)
{
	sqlite3_stmt *st = NULL;
	char text[600];

	log_line(text, sizeof(text), now, line);
	if (sqlite3_prepare_v2(db, "UPDATE tasks SET log = substr(log || ?2, -?3) WHERE ref = ?1 AND state = 'running'",
			       -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_text(st, 1, ref, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 2, text, -1, SQLITE_STATIC);
		sqlite3_bind_int(st, 3, TASK_LOG_MAX);
	}
	exec_or_log(db, st, "write a task's log");
}

void
task_update(sqlite3 *db, const char *ref, double progress, const char *line, int64_t now)
{
	sqlite3_stmt *st = NULL;

	if (progress >= 0) {
		if (sqlite3_prepare_v2(db, "UPDATE tasks SET progress = ?2 WHERE ref = ?1 AND state = 'running'", -1,
				       &st, NULL) == SQLITE_OK) {
			sqlite3_bind_text(st, 1, ref, -1, SQLITE_STATIC);
			sqlite3_bind_double(st, 2, progress > 1 ? 1 : progress);
		}
		exec_or_log(db, st, "record a task's progress");
	}
	if (line != NULL)
		append(db, ref, line, now);
}

void
task_finish(sqlite3 *db, const char *ref, int ok, const char *result, int64_t now)
{
	sqlite3_stmt *st = NULL;

	append(db, ref, ok ? "done" : "failed", now);
	if (sqlite3_prepare_v2(db,
			       "UPDATE tasks SET state = ?2, ended_at = ?3, result = ?4, "
			       "progress = CASE WHEN ?2 = 'done' THEN 1 ELSE progress END "
			       "WHERE ref = ?1 AND state = 'running'",
			       -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_text(st, 1, ref, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 2, ok ? "done" : "failed", -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 3, now);
		sqlite3_bind_text(st, 4, result, -1, SQLITE_STATIC);
	}
	exec_or_log(db, st, "end a task");
}

void
task_abandon_all(sqlite3 *db, int64_t now)
{
	sqlite3_stmt *st = NULL;

	if (sqlite3_prepare_v2(db,
			       "UPDATE tasks SET state = 'failed', ended_at = ?1, result = 'privai-admin stopped "
			       "while it ran', log = log || 'privai-admin stopped' || char(10) WHERE state = 'running'",
			       -1, &st, NULL) == SQLITE_OK)
		sqlite3_bind_int64(st, 1, now);
	exec_or_log(db, st, "end the tasks of the last run");
}
