/*
 * Query results as JSON: each row an object keyed by column name
 * (INTEGER and REAL as numbers, TEXT as strings, NULL as null; BLOBs,
 * which hold only hashes, are never shown; columns named placement,
 * options, detail, inventory and instances hold JSON text and are returned as JSON).  Handlers select exactly the
 * columns a client may see, with `AS` names from the OpenAPI document.
 */
#ifndef PRIVAI_ADMIN_ROWS_H
#define PRIVAI_ADMIN_ROWS_H

#include <cjson/cJSON.h>
#include <sqlite3.h>
#include <stdint.h>

/* Every row of a prepared statement (finalized here); NULL on error. */
cJSON *rows_json(sqlite3_stmt *st);
/* The first row only (finalized here too); *found says whether there was one.  NULL on error. */
cJSON *row_json(sqlite3_stmt *st, int *found);

/* Prepare sql, binding int64 arguments ?1..?n; NULL on error. */
sqlite3_stmt *rows_prepare(sqlite3 *db, const char *sql, int n, const int64_t *args);

#endif
