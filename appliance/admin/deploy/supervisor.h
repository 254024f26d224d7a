/*
 * The deployment supervisor: one thread that makes the running engines
 * match the deployments table.  A deployment that should run gets a
 * `privai-engine serve` child (loading until its /health answers 200,
 * then ready); one that exits is marked failed with its exit status and
 * the last line it logged, and started again after a backoff that
 * doubles from 1 s to 60 s; one that should stop, or whose row is gone,
 * gets SIGTERM and, 30 s later, SIGKILL.  Children die with privai-admin
 * (PR_SET_PDEATHSIG); systemd units outlive it, and the next start keeps
 * those that still run what it would start (runner_adopt) and stops the
 * others before it starts anything, so it never finds strays on its ports.
 */
#ifndef PRIVAI_ADMIN_SUPERVISOR_H
#define PRIVAI_ADMIN_SUPERVISOR_H

#include <stddef.h>
#include <stdint.h>

struct admin;
struct supervisor;

int supervisor_start(struct admin *a, struct supervisor **ret, char *err);
/* Stop the thread, and every engine that is a child process (SIGTERM,
 * then SIGKILL after 10 s); systemd units go on serving. */
void supervisor_stop(struct supervisor *s);
int supervisor_alive(struct supervisor *s);
/* Reconcile now rather than at the next tick (after a change). */
void supervisor_kick(struct supervisor *s);
/* Restart deployment id's engine (new placement or options). */
void supervisor_restart(struct supervisor *s, int64_t id);
/* For the proxy: the port of deployment id's engine when it is ready,
 * and the key the admin itself uses on it.  0, or an APP_E* code when not ready. */
int supervisor_endpoint(struct supervisor *s, int64_t id, int *port, char *key, size_t key_size);
/* Rewrite deployment id's key file and tell its engine to reread it.
 * The caller holds the store's mutex. */
int supervisor_keys_changed(struct supervisor *s, int64_t id);

/* STATE/deployments/ID (name NULL), where a deployment's key file and
 * log live, or the file name in it; APP_ERANGE when it does not fit. */
int deploy_file(struct admin *a, int64_t id, const char *name, char *out, size_t size);

#endif
