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

/* The schema version this binary writes (the number of migrations). */
int db_schema_version(void);

/* Open (creating if need be) and migrate.  PRIVAI_OK, or an error naming
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
 * tables.  PRIVAI_OK, or PRIVAI_EFORMAT/EIO with err. */
int db_check_file(const char *path, char *err);

/* Transactions for changes that take more than one statement:
 * BEGIN IMMEDIATE (the write lock at once, so no upgrade deadlock),
 * COMMIT, ROLLBACK.  0 or -1 (sqlite3_errmsg says why). */
int db_begin(sqlite3 *db);
int db_commit(sqlite3 *db);
void db_rollback(sqlite3 *db);

/* Delete the row of table with this id: the number of rows deleted (0
 * or 1), or -1 (sqlite3_errmsg says why).  table is one of ours, never
 * input. */
int db_delete_id(sqlite3 *db, const char *table, int64_t id);

/* Run sql (no results) or fail with sqlite's message. */
int db_exec(sqlite3 *db, const char *sql, char *err);

#endif
