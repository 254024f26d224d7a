/* The daemon's clocks, and audit rows with nobody to answer (admin.h). */
#include <time.h>

#include "status.h"
#include "admin.h"
#include "log.h"
#include "store/audit.h"

void
admin_audit(sqlite3 *db, int64_t at, const char *actor, const char *action, const char *target, const char *addr,
	    const char *result, const char *detail)
{
	if (audit_write(db, at, actor, action, target, addr, result, detail) != APP_OK)
		log_error("audit row %s %s by %s not written: %s", action, target ? target : "", actor,
			  sqlite3_errmsg(db));
}

int64_t
admin_now(void)
{
	return (int64_t)time(NULL);
}

int64_t
admin_mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
