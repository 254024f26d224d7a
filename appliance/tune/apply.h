/*
 * privai-tune apply / revert.  apply plans the changes a profile asks of
 * the host, records every value it replaces in a state file
 * (/var/lib/privai/tune/applied.json under the root) before it writes, and
 * writes; revert puts every recorded value back, removes what apply
 * created, and the state file with it.  Applying twice records nothing
 * new (the first old values are kept), so revert always returns to the
 * host as it was before the first apply.
 */
#ifndef PRIVAI_TUNE_APPLY_H
#define PRIVAI_TUNE_APPLY_H

#include <stdio.h>

#include "tune.h"

#define TUNE_STATE_DIR "/var/lib/privai/tune"
#define TUNE_STATE_FILE TUNE_STATE_DIR "/applied.json"

enum change_kind {
	CHANGE_ATTR,     /* a sysfs/procfs value written in place */
	CHANGE_SELECTOR, /* a sysfs choice list ("always [madvise] never") */
	CHANGE_FILE,     /* a file apply creates or replaces (drop-ins, modules-load.d) */
	CHANGE_LINK,     /* a symlink apply creates (enabling a unit) */
};

struct change {
	enum change_kind kind;
	char what[48];  /* "CPU governor", for people */
	char path[256]; /* under the root */
	char old[256];  /* the value before ("" for a file that did not exist) */
	char new[256];  /* the value, file contents or link target apply writes */
	int existed;    /* CHANGE_FILE/CHANGE_LINK: something was there before */
	int done;       /* already as wanted: nothing to write */
	char note[160]; /* why it was skipped or failed */
};

struct plan {
	int n, cap;
	struct change *c;
};

/* What apply would change on this host for its profile. 0, or an APP_E* code with err. */
int apply_plan(const struct tune_host *h, struct plan *p, char *err, size_t errsize);

/* Record then write.  Reports each change on out; 0, or an APP_E* code with err when
 * the state could not be recorded (then nothing was written) or a write
 * failed (what was written stays recorded, so revert undoes it). */
int apply_run(const struct tune_host *h, struct plan *p, FILE *out, char *err, size_t errsize);

/* Put back what the state file records.  0 (also when nothing was
 * applied), or an APP_E* code with err. */
int apply_revert(const char *root, FILE *out, char *err, size_t errsize);

/* The plan as text, grouped ("CPU governor on 224 CPUs: powersave -> performance"). */
void plan_print(const struct plan *p, FILE *out, const char *verb);

/* A new zeroed change at the end of p; NULL when memory ran out. */
struct change *plan_add(struct plan *p);

void plan_free(struct plan *p);

#endif
