/*
 * The appliance's status codes (admin, tune, fabric, firstboot, and what
 * they share in appliance/lib).
 *
 * A fallible function returns an int: APP_OK (0), or a negative APP_E*
 * code; one that can say why also takes a caller's `char *err` of
 * APP_ERR_LEN bytes (NULL allowed) and writes one line into it naming
 * the problem.  Library code never prints; its caller reports once.
 * A function that returns a count or an index returns it (>= 0) on
 * success and an APP_E* code on failure.
 *
 * The first nine codes have the engine's values (privai/status.h), so a
 * status from the engine's GGUF reader passes through unchanged; the
 * codes after them are the appliance's own.
 */
#ifndef PRIVAI_APP_STATUS_H
#define PRIVAI_APP_STATUS_H

#define APP_ERR_LEN 512

enum app_status {
	APP_OK = 0,
	APP_EIO = -1,          /* a read, write, open, exec or store operation failed */
	APP_ENOMEM = -2,       /* an allocation failed */
	APP_EFORMAT = -3,      /* a file, reply or record is malformed */
	APP_EUNSUPPORTED = -4, /* valid, but not something this appliance handles */
	APP_EINVAL = -5,       /* a caller or an outside input passed a bad value */
	APP_ERANGE = -6,       /* a size, count or value exceeds a limit (or a buffer) */
	APP_ENOTFOUND = -7,    /* a named file, key, row or device is absent */
	APP_EBUSY = -8,        /* taken or in use (a name, a port, a GPU); try another */
	APP_EUNAVAIL = -9,     /* not ready, stopping, or a peer is unreachable */
	APP_EDENIED = -10,     /* refused by a rule or a permission */
};

/* Short name of a status code ("invalid value"), never NULL. */
const char *app_status_str(int status);

/* Write a formatted message into err (if not NULL) and return status,
 * so error paths read `return app_fail(err, APP_EINVAL, "...")`. */
int app_fail(char *err, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
