/*
 * How engine processes run.  Under systemd each engine is a transient
 * service unit started over D-Bus (sd-bus): systemd owns its cgroup, its
 * log file, its limits and its hardening, `systemctl status` shows it,
 * and it is not a child of privai-admin.  Elsewhere (a container, a
 * developer's shell) it is a child process that dies with privai-admin.
 * The supervisor drives either through the same four calls, from its one
 * thread: an sd-bus connection is not shared between threads.
 */
#ifndef PRIVAI_ADMIN_RUNNER_H
#define PRIVAI_ADMIN_RUNNER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "deploy/cpuset.h"

enum runner_mode {
	RUNNER_AUTO, /* systemd's system manager when booted with systemd and root, its
			       user manager when booted with systemd and not root, else children */
	RUNNER_CHILD,
	RUNNER_SYSTEMD,     /* the system manager */
	RUNNER_SYSTEMD_USER /* the calling user's manager */
};

struct runner;

/* "auto", "child", "systemd" or "systemd-user"; APP_EINVAL for anything else. */
int runner_parse_mode(const char *s, enum runner_mode *mode);

/* Connect to the manager the mode names.  `tag` keeps this admin's units
 * apart from another's on the same host (unit names are
 * privai-engine-TAG-ID.service).  Units a previous run of this admin left
 * behind are listed, for runner_adopt() and runner_stop_leftovers().  In
 * auto mode a manager that does not answer means children, and *note
 * says why. */
int runner_open(enum runner_mode mode, const char *tag, struct runner **ret, char *note, size_t note_size, char *err);
void runner_close(struct runner *r);
/* 1: the unit a previous run left for deployment id is active and runs
 * exactly argv, from the binary argv[0] names now (not one replaced
 * since); its main process is *pid and it is the caller's from now on.
 * 0: not adopted, and `why` says why when there was such a unit. */
int runner_adopt(struct runner *r, int64_t id, char *const argv[], pid_t *pid, char *why, size_t why_size);
/* When process pid started, in Unix seconds (from /proc), or APP_ENOTFOUND. */
int64_t runner_started_at(pid_t pid);
/* Stop the units a previous run left that were not adopted, and wait
 * until they are gone (their names and ports are then free). */
void runner_stop_leftovers(struct runner *r);
/* 1 when engines outlive privai-admin (systemd units), 0 for children. */
int runner_outlives(const struct runner *r);
/* "child processes", "transient units of the system manager", ... */
const char *runner_describe(const struct runner *r);
/* The unit name of deployment id, or "" for children. */
void runner_unit_name(const struct runner *r, int64_t id, char *out, size_t size);

/* Start argv (argv[0] an absolute path) for deployment id with stdout and
 * stderr appended to log_path; *pid is its process.  `log_fd` is
 * log_path opened for appending, which a child inherits.  A non-empty
 * cpus->set bounds the CPUs it runs on: the affinity of a child (and a
 * memory policy bound to cpus->node where that is >= 0); CPUAffinity= and
 * AllowedCPUs= (with AllowedMemoryNodes= for a node) of a unit. */
int runner_start(struct runner *r, int64_t id, const char *description, char *const argv[], const char *log_path,
		 int log_fd, const struct engine_cpus *cpus, pid_t *pid, char *err);
/* 1: still running.  0: it has ended, *status is a wait(2) status and
 * `why` says more when the manager knows more (or is "").  APP_EIO:
 * cannot tell (err), try again later. */
int runner_wait(struct runner *r, int64_t id, pid_t pid, int *status, char *why, size_t why_size, char *err);
/* Send sig to the engine (SIGTERM and SIGKILL to all its processes). */
int runner_signal(struct runner *r, int64_t id, pid_t pid, int sig, char *err);

#endif
