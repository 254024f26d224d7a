/* The appliance's status codes (status.h). */
#include <stdarg.h>
#include <stdio.h>

#include "status.h"

const char *
app_status_str(int status)
{
	switch (status) {
	case APP_OK:
		return "ok";
	case APP_EIO:
		return "I/O error";
	case APP_ENOMEM:
		return "out of memory";
	case APP_EFORMAT:
		return "malformed";
	case APP_EUNSUPPORTED:
		return "unsupported";
	case APP_EINVAL:
		return "invalid value";
	case APP_ERANGE:
		return "out of range";
	case APP_ENOTFOUND:
		return "not found";
	case APP_EBUSY:
		return "busy";
	case APP_EUNAVAIL:
		return "unavailable";
	case APP_EDENIED:
		return "denied";
	default:
		return "unknown status";
	}
}

int
app_fail(char *err, int status, const char *fmt, ...)
{
	va_list ap;

	if (err != NULL) {
		va_start(ap, fmt);
		vsnprintf(err, APP_ERR_LEN, fmt, ap); /* a message, cut to its buffer */
		va_end(ap);
	}
	return status;
}
