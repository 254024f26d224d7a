/* Appending to the audit log. */
#include <stddef.h>

#include "status.h"
#include "store/audit.h"

int
audit_write(sqlite3 *db, int64_t at, const char *actor, const char *action, const char *target, const char *addr,
	    const char *result, const char *detail)
{
	sqlite3_stmt *st;

	if (sqlite3_prepare_v2(db,
			       "INSERT INTO audit_log (at, actor, action, target, remote_addr, result, detail) "
			       "VALUES (?, ?, ?, ?, ?, ?, ?)",
			       -1, &st, NULL) != SQLITE_OK)
		return APP_EIO;
	sqlite3_bind_int64(st, 1, at);
	sqlite3_bind_text(st, 2, actor, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 3, action, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 4, target, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 5, addr, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 6, result, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 7, detail, -1, SQLITE_TRANSIENT);
	return db_write(db, st, NULL);
}
