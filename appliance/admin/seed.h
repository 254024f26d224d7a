/* What a first start puts in an empty store: the first admin account and,
 * when asked, the demo model registered and deployed on CPU. */
#ifndef PRIVAI_ADMIN_SEED_H
#define PRIVAI_ADMIN_SEED_H

struct admin;

/* With no users: an 'admin' account whose password comes from the file
 * PRIVAI_ADMIN_PASSWORD_FILE names, or is generated, printed once to
 * stderr, and must be changed at first login.  With demo_model and no
 * models: that file registered as 'demo' and deployed as 'demo'. */
int seed_first_start(struct admin *a, const char *demo_model, char *err);

#endif
