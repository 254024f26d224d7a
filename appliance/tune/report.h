/*
 * A preflight report: a list of checks, each with a stable id, a status,
 * what was found, what is expected and the fix.  Checks that cannot apply
 * on this host are `skip` with the reason in `found`.
 */
#ifndef PRIVAI_TUNE_REPORT_H
#define PRIVAI_TUNE_REPORT_H

#include <cjson/cJSON.h>

enum check_status { CHECK_PASS, CHECK_WARN, CHECK_FAIL, CHECK_SKIP };

struct check {
	char id[48]; /* "gpu.3.link", "pcie.pairing" */
	char title[80];
	enum check_status status;
	char found[320];
	char expected[200];
	char fix[400];
};

struct report {
	int n, cap;
	struct check *c;
	int oom; /* a check was dropped for want of memory */
};

/* Add a check; then say what was found, what is expected and the fix.
 * Never NULL: out of memory, the check goes to a scratch slot and the
 * report's `oom` is set. */
struct check *report_add(struct report *r, const char *id, const char *title, enum check_status st);
void report_found(struct check *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void report_expected(struct check *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void report_fix(struct check *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

const char *check_status_name(enum check_status st);
int report_count(const struct report *r, enum check_status st);
const struct check *report_get(const struct report *r, const char *id);
cJSON *report_json(const struct report *r, const char *root, const char *profile);
void report_free(struct report *r);

#endif
