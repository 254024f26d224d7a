/*
 * Tasks: the long operations an operator waits on (uploads, hashing,
 * deployment starts and moves, MIG layouts, backups, restores, node
 * joins), each with its progress, start and end, result and a short log,
 * kept after they end (the newest TASKS_KEEP) so the console's task view
 * shows them after a reload.  A task is found while it runs by its ref,
 * what it works on ("upload:3", "deployment:7").  The caller holds the
 * store's mutex; a row that cannot be written is logged, never an error
 * for the operation itself.
 */
#ifndef PRIVAI_ADMIN_TASKS_H
#define PRIVAI_ADMIN_TASKS_H

#include <sqlite3.h>
#include <stdint.h>

#define TASKS_KEEP 1000
#define TASK_LOG_MAX 8192 /* the log keeps its newest lines within this */

/* Begin a task, or answer the one running for ref. */
int64_t task_begin(sqlite3 *db, const char *kind, const char *ref, const char *target, const char *actor, int64_t now);
/* The running task for ref: progress 0..1 (<0: unchanged) and a log line
 * (NULL: none). */
void task_update(sqlite3 *db, const char *ref, double progress, const char *line, int64_t now);
/* End the running task for ref with its result (a sentence). */
void task_finish(sqlite3 *db, const char *ref, int ok, const char *result, int64_t now);
/* At start: what was running when the admin stopped ended with it. */
void task_abandon_all(sqlite3 *db, int64_t now);

#endif
