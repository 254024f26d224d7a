/* Status codes and the one helper that formats an error message. */
#include <stdio.h>

#include "privai/status.h"

const char *
privai_status_str(int status)
{
	switch (status) {
	case PRIVAI_OK:
		return "ok";
	case PRIVAI_EIO:
		return "i/o error";
	case PRIVAI_ENOMEM:
		return "out of memory";
	case PRIVAI_EFORMAT:
		return "format error";
	case PRIVAI_EUNSUPPORTED:
		return "unsupported";
	case PRIVAI_EINVAL:
		return "invalid argument";
	case PRIVAI_ERANGE:
		return "out of range";
	case PRIVAI_ENOTFOUND:
		return "not found";
	case PRIVAI_EBUSY:
		return "busy";
	case PRIVAI_EUNAVAIL:
		return "unavailable";
	}
	return "unknown error";
}

int
privai_fail(char *err, int status, const char *fmt, ...)
{
	va_list ap;

	if (err != NULL) {
		va_start(ap, fmt);
		vsnprintf(err, PRIVAI_ERR_LEN, fmt, ap);
		va_end(ap);
	}
	return status;
}
