/* What a first start puts in an empty store: the first admin account and,
 * when asked, the demo model registered and deployed on CPU. */
#ifndef PRIVAI_ADMIN_SEED_H
#define PRIVAI_ADMIN_SEED_H

struct admin;

/* Where a generated first password goes when stderr is not a terminal
 * (under systemd it is the journal, which must never hold it): a file in
 * the state directory, mode 0600, removed when the admin changes it. */
#define SEED_PASSWORD_FILE "initial-admin-password"

/* With no users: an 'admin' account whose password comes from the file
 * PRIVAI_ADMIN_PASSWORD_FILE names, or is generated and must be changed
 * at first login; a generated one is printed once on the terminal that
 * started the admin, or written to SEED_PASSWORD_FILE (the log names the
 * path, never the password).  With demo_model and no
 * models: that file registered as 'demo' and deployed as 'demo'.  Then,
 * at every start, the day-0 models (seed_day0_models). */
int seed_first_start(struct admin *a, const char *demo_model, const char *day0_models, char *err);

/* Day-0 models (PRIVAI_DAY0_MODELS, from privai-firstboot's `models` key):
 * each absolute .gguf path in the comma-separated list that no model has
 * yet is registered under its file name (without .gguf; "-2", "-3"... on
 * a clash), at every start, so a path added later is taken then.  A path
 * that cannot be registered is audited as refused and named in the log;
 * the start goes on.  Returns how many were registered. */
int seed_day0_models(struct admin *a, const char *list);

#endif
