/* Helpers for the tests of the admin store. */
#ifndef PRIVAI_DBTESTLIB_H
#define PRIVAI_DBTESTLIB_H

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>

/* The first column of the first row of sql as an integer; -1 on error. */
static inline long
sql_count(sqlite3 *db, const char *sql)
{
	sqlite3_stmt *st;
	long n = -1;

	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
		n = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return n;
}

/* A test's own setup statement: one that fails ends the test program
 * (every check after it would test something else). */
static inline void
sql_must(sqlite3 *db, const char *sql)
{
	char *msg = NULL;

	if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) {
		fprintf(stderr, "setup failed: %s: %s\n", sql, msg ? msg : sqlite3_errmsg(db));
		exit(1);
	}
}

#endif
