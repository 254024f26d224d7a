/* The appliance's log (log.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define SD_JOURNAL_SUPPRESS_LOCATION /* CODE_FUNC is ours: the caller's */
#include <systemd/sd-journal.h>

#include "log.h"

static const char *log_prog = "privai";
static enum log_level log_max = LOG_LEVEL_INFO;
static int log_journal;
static _Thread_local const char *log_req;

/* systemd sets JOURNAL_STREAM to "DEV:INODE" of the stream it connected
 * stderr to; stderr still being that stream means the journal reads it */
static int
stderr_is_journal(void)
{
	const char *e = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat sb;

	if (e == NULL || sscanf(e, "%llu:%llu", &dev, &ino) != 2 || fstat(2, &sb) != 0)
		return 0;
	return (unsigned long long)sb.st_dev == dev && (unsigned long long)sb.st_ino == ino;
}

void
log_init(const char *prog, enum log_level max_level)
{
	log_prog = prog;
	log_max = max_level;
	log_journal = stderr_is_journal();
}

void
log_set_request(const char *id)
{
	log_req = id;
}

const char *
log_request(void)
{
	return log_req;
}

static const char *
level_name(enum log_level level)
{
	switch (level) {
	case LOG_LEVEL_ERROR:
		return "error: ";
	case LOG_LEVEL_WARN:
		return "warning: ";
	case LOG_LEVEL_DEBUG:
		return "debug: ";
	default:
		return "";
	}
}

void
log_write(enum log_level level, const char *func, const char *fmt, ...)
{
	char msg[2048];
	va_list ap;

	if (level > log_max)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap); /* a longer line is cut: a log line, not data */
	va_end(ap);
	if (log_journal &&
	    sd_journal_send("MESSAGE=%s", msg, "PRIORITY=%d", (int)level, "CODE_FUNC=%s", func, "SYSLOG_IDENTIFIER=%s",
			    log_prog, "PRIVAI_REQUEST_ID=%s", log_req ? log_req : "", NULL) >= 0)
		return;
	if (log_req != NULL)
		fprintf(stderr, "%s: %s%s req=%s\n", log_prog, level_name(level), msg, log_req);
	else
		fprintf(stderr, "%s: %s%s\n", log_prog, level_name(level), msg);
}
