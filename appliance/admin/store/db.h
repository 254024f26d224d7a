/*
 * privai-admin's store: one sqlite database in WAL mode with foreign keys
 * on, its schema brought up to date by numbered migrations at open (and a
 * database newer than this binary refused), online backup to a file and
 * restore from one.
 */
#ifndef PRIVAI_ADMIN_DB_H
#define PRIVAI_ADMIN_DB_H

#include <sqlite3.h>
#include <stdint.h>

/* A write's result must be looked at: the compiler refuses a call that
 * drops it (GCC does not let a (void) cast hide it either). */
#define DB_CHECKED __attribute__((warn_unused_result))

/* The schema version this binary writes (the number of migrations). */
int db_schema_version(void);

/* Open (creating if need be) and migrate.  APP_OK, or an error naming
 * the file and the problem; nothing is changed on error. */
int db_open(const char *path, sqlite3 **ret, char *err);
void db_close(sqlite3 *db);

/* The schema version recorded in an open database. */
int db_user_version(sqlite3 *db);

/* 1 when PRAGMA integrity_check says "ok"; otherwise 0 with its first
 * complaint in err. */
int db_integrity_ok(sqlite3 *db, char *err);

/* Copy the live database to path (written to a temporary file, then
 * renamed, so a failed backup leaves no half file). */
int db_backup(sqlite3 *db, const char *path, char *err);

/* Replace the live database's contents with the backup at path, after
 * checking that it is an intact privai-admin database no newer than this
 * binary.  On any error the live database is unchanged. */
int db_restore(sqlite3 *db, const char *path, char *err);
/* The checks db_restore makes, alone: a sqlite file that passes
 * integrity_check, with a schema version this binary reads and our
 * tables.  APP_OK, or APP_EFORMAT/EIO with err. */
int db_check_file(const char *path, char *err);

/* Transactions for changes that take more than one statement:
 * BEGIN IMMEDIATE (the write lock at once, so no upgrade deadlock),
 * COMMIT, ROLLBACK.  APP_OK or APP_EIO (sqlite3_errmsg says why). */
DB_CHECKED int db_begin(sqlite3 *db);
/* In a transaction of store_fn's changes: begin, call, commit, or roll
 * back on any failure.  APP_OK, or the failure with err. */
DB_CHECKED int db_transaction(sqlite3 *db, int (*store_fn)(sqlite3 *db, void *arg, char *err), void *arg, char *err);
DB_CHECKED int db_commit(sqlite3 *db);
/* Rolls back an open transaction; APP_OK when none was open.  A
 * rollback that fails leaves sqlite to undo the journal at the next
 * open, so callers on an error path may go on; the result says so. */
int db_rollback(sqlite3 *db);

/* Delete the row of table with this id: the number of rows deleted (0
 * or 1), or APP_EIO (sqlite3_errmsg says why).  table is one of ours, never
 * input. */
DB_CHECKED int db_delete_id(sqlite3 *db, const char *table, int64_t id);

/* Run sql (no results) or fail with sqlite's message. */
DB_CHECKED int db_exec(sqlite3 *db, const char *sql, char *err);

/*
 * Writes, checked.  Every INSERT, UPDATE and DELETE goes through one of
 * these, so a failed write is an error its caller sees (and answers, or
 * logs where nobody waits for it), never a 200 over a lost change.
 *
 * db_step_write: step a bound write statement to its end.  APP_OK
 * when sqlite says DONE; APP_EBUSY for a constraint; APP_EIO for
 * anything else; err (NULL allowed) gets sqlite's message.  The
 * statement is reset, its binds kept, so a loop may bind and step again;
 * finalizing stays the caller's.
 *
 * db_write: the same for a statement used once, finalized whatever
 * happened; st NULL (its prepare failed) is APP_EIO with the
 * connection's message.
 */
DB_CHECKED int db_step_write(sqlite3 *db, sqlite3_stmt *st, char *err);
DB_CHECKED int db_write(sqlite3 *db, sqlite3_stmt *st, char *err);

/* The first column of the first row of sql, with ?1 bound to arg when
 * sql has a parameter: its value, none when there is no row, APP_EIO when
 * sql cannot run.  For lookups of one number (a count, an id, a flag). */
int64_t db_int64(sqlite3 *db, const char *sql, int64_t arg, int64_t none);

/* Prepare sql: APP_OK with *ret, or APP_EIO with sqlite's
 * message (*ret NULL then, which db_write reports). */
int db_prepare(sqlite3 *db, const char *sql, sqlite3_stmt **ret, char *err);

#endif
