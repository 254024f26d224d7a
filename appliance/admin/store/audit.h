/*
 * The audit log: every change and every refused change, with who asked,
 * from where, when, and what came of it.  Rows are only ever inserted.
 */
#ifndef PRIVAI_ADMIN_AUDIT_H
#define PRIVAI_ADMIN_AUDIT_H

#include <sqlite3.h>
#include <stdint.h>

#include "store/db.h"

/* result: "ok" or "refused"; detail: a JSON object's text or NULL.
 * APP_OK, or APP_EIO when the row could not be written. */
DB_CHECKED int audit_write(sqlite3 *db, int64_t at, const char *actor, const char *action, const char *target,
			   const char *addr, const char *result, const char *detail);

#endif
