/*
 * The appliance's log: one line per event, with its level, the function
 * that logged it and, inside an HTTP request, the request's id, so one
 * request's lines can be found together (journalctl
 * PRIVAI_REQUEST_ID=...).
 *
 * Under systemd (JOURNAL_STREAM names our stderr) a line goes to the
 * journal through sd_journal_send with the fields PRIORITY, CODE_FUNC,
 * SYSLOG_IDENTIFIER and PRIVAI_REQUEST_ID; anywhere else to stderr as
 *
 *     PROG: message [req=ID]                  (info)
 *     PROG: warning: message [req=ID]         (warn, error, debug alike)
 *
 * Library code logs at debug at most and returns errors instead; the
 * daemons' own code (threads that have nobody to return to) logs.  The
 * level is checked before anything is formatted.
 */
#ifndef PRIVAI_LOG_H
#define PRIVAI_LOG_H

/* syslog's priorities, which the journal keeps as PRIORITY */
enum log_level {
	LOG_LEVEL_ERROR = 3,
	LOG_LEVEL_WARN = 4,
	LOG_LEVEL_INFO = 6,
	LOG_LEVEL_DEBUG = 7,
};

/* prog prefixes stderr lines and is the journal's identifier; lines
 * above max_level are dropped.  Before any other call, from main. */
void log_init(const char *prog, enum log_level max_level);

/* The calling thread's request id (NULL: none), added to its lines. */
void log_set_request(const char *id);
const char *log_request(void);

void log_write(enum log_level level, const char *func, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#define log_error(...) log_write(LOG_LEVEL_ERROR, __func__, __VA_ARGS__)
#define log_warn(...) log_write(LOG_LEVEL_WARN, __func__, __VA_ARGS__)
#define log_info(...) log_write(LOG_LEVEL_INFO, __func__, __VA_ARGS__)
#define log_debug(...) log_write(LOG_LEVEL_DEBUG, __func__, __VA_ARGS__)

#endif
