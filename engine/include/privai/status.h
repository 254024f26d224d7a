/*
 * privai engine status codes.
 *
 * Every fallible engine function returns an int: PRIVAI_OK (0) on success or
 * a negative PRIVAI_E* code.  Functions that can explain a failure also take a
 * caller-owned `char *err` buffer of PRIVAI_ERR_LEN bytes (NULL allowed) and
 * write one line into it naming the problem (and, for files, the offset).
 * Library code never prints; the caller reports the message once.
 */
#ifndef PRIVAI_STATUS_H
#define PRIVAI_STATUS_H

#include <stdarg.h>

#define PRIVAI_ERR_LEN 512

enum privai_status {
	PRIVAI_OK = 0,
	PRIVAI_EIO = -1,          /* a read, write, open or mmap failed */
	PRIVAI_ENOMEM = -2,       /* an allocation failed */
	PRIVAI_EFORMAT = -3,      /* a file is truncated, corrupt or hostile */
	PRIVAI_EUNSUPPORTED = -4, /* valid input this engine does not handle */
	PRIVAI_EINVAL = -5,       /* a caller passed a bad argument */
	PRIVAI_ERANGE = -6,       /* a size or position exceeds a limit */
	PRIVAI_ENOTFOUND = -7,    /* a named key or tensor is absent */
	PRIVAI_EBUSY = -8,        /* a queue or pool is full; try again later */
	PRIVAI_EUNAVAIL = -9,     /* shutting down or not ready */
};

/* Short name of a status code ("format error"), never NULL. */
const char *privai_status_str(int status);

/* Write a formatted message into err (if not NULL) and return `status`.
 * Lets error paths read `return privai_fail(err, PRIVAI_EFORMAT, "...")`. */
int privai_fail(char *err, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
