/* Checked and cut-on-purpose formatting (strfmt.h). */
#include <stdarg.h>
#include <stdio.h>

#include "status.h"
#include "strfmt.h"

int
str_fmt(char *out, size_t size, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (size == 0)
		return APP_ERANGE;
	va_start(ap, fmt);
	n = vsnprintf(out, size, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= size) {
		out[0] = '\0'; /* half a path must not be used by mistake */
		return APP_ERANGE;
	}
	return APP_OK;
}

void
msg_fmt(char *out, size_t size, const char *fmt, ...)
{
	va_list ap;

	if (size == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(out, size, fmt, ap);
	va_end(ap);
}
