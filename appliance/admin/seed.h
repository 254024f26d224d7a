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
 * models: that file registered as 'demo' and deployed as 'demo'. */
int seed_first_start(struct admin *a, const char *demo_model, char *err);

#endif
