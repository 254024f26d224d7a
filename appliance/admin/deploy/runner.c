/* Engine processes as children, or as transient systemd units over sd-bus. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <linux/mempolicy.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <systemd/sd-bus.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>

#include "status.h"
#include "deploy/runner.h"

#define SD_DEST "org.freedesktop.systemd1"
#define SD_PATH "/org/freedesktop/systemd1"
#define SD_MANAGER "org.freedesktop.systemd1.Manager"
#define SD_UNIT "org.freedesktop.systemd1.Unit"
#define SD_SERVICE "org.freedesktop.systemd1.Service"
#define STOP_TIMEOUT_US (30ULL * 1000000)
#define START_WAIT_MS 15000
#define MAX_LEFTOVERS 256

struct runner {
	enum runner_mode mode; /* RUNNER_CHILD, RUNNER_SYSTEMD or RUNNER_SYSTEMD_USER once open */
	sd_bus *bus;
	char tag[40];
	int root;                  /* the manager runs as root, so namespaces and raised limits work */
	char *left[MAX_LEFTOVERS]; /* units a previous run left, not (yet) adopted */
	int n_left;
};

/* What the manager says about a unit. */
struct unit_state {
	int found;
	char active[32]; /* ActiveState: active, activating, failed, ... */
	char result[32]; /* the service's Result: success, exit-code, signal, oom-kill, ... */
	uint32_t main_pid;
	int32_t code, status; /* ExecMainCode (CLD_EXITED, CLD_KILLED, CLD_DUMPED), ExecMainStatus */
	uint32_t job;         /* a queued or running job's id, 0 for none */
};

int
runner_parse_mode(const char *s, enum runner_mode *mode)
{
	static const char *const names[] = { "auto", "child", "systemd", "systemd-user" };

	for (int i = 0; i < 4; i++)
		if (strcmp(s, names[i]) == 0) {
			*mode = (enum runner_mode)i;
			return 0;
		}
	return APP_EINVAL;
}

const char *
runner_describe(const struct runner *r)
{
	switch (r->mode) {
	case RUNNER_SYSTEMD:
		return "transient units of the systemd system manager";
	case RUNNER_SYSTEMD_USER:
		return "transient units of the systemd user manager";
	default:
		return "child processes";
	}
}

int
runner_outlives(const struct runner *r)
{
	return r->bus != NULL;
}

void
runner_unit_name(const struct runner *r, int64_t id, char *out, size_t size)
{
	if (r->bus == NULL)
		snprintf(out, size, "%s", "");
	else
		snprintf(out, size, "privai-engine-%s-%lld.service", r->tag, (long long)id);
}

static int
bus_fail(char *err, const char *what, const sd_bus_error *e, int rc)
{
	return app_fail(err, APP_EIO, "%s: %s", what,
			sd_bus_error_is_set(e) ? e->message : strerror(rc < 0 ? -rc : rc));
}

static void
sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

static int
unit_state(struct runner *r, const char *unit, struct unit_state *st, char *err)
{
	sd_bus_error e = SD_BUS_ERROR_NULL;
	sd_bus_message *reply = NULL;
	const char *path;
	char *s = NULL;
	int rc;

	memset(st, 0, sizeof(*st));
	rc = sd_bus_call_method(r->bus, SD_DEST, SD_PATH, SD_MANAGER, "GetUnit", &e, &reply, "s", unit);
	if (rc < 0) {
		int gone = sd_bus_error_has_name(&e, "org.freedesktop.systemd1.NoSuchUnit");
		rc = gone ? 0 : bus_fail(err, unit, &e, rc);
		sd_bus_error_free(&e);
		return rc;
	}
	if ((rc = sd_bus_message_read(reply, "o", &path)) < 0)
		goto out;
	st->found = 1;
	if ((rc = sd_bus_get_property_string(r->bus, SD_DEST, path, SD_UNIT, "ActiveState", &e, &s)) < 0)
		goto out;
	snprintf(st->active, sizeof(st->active), "%s", s);
	free(s);
	s = NULL;
	/* a unit whose start job has not run yet is "inactive" too: the job tells them apart */
	sd_bus_message *job = NULL;
	const char *job_path;
	if ((rc = sd_bus_get_property(r->bus, SD_DEST, path, SD_UNIT, "Job", &e, &job, "(uo)")) < 0 ||
	    (rc = sd_bus_message_read(job, "(uo)", &st->job, &job_path)) < 0) {
		sd_bus_message_unref(job);
		goto out;
	}
	sd_bus_message_unref(job);
	if ((rc = sd_bus_get_property_string(r->bus, SD_DEST, path, SD_SERVICE, "Result", &e, &s)) < 0 ||
	    (rc = sd_bus_get_property_trivial(r->bus, SD_DEST, path, SD_SERVICE, "MainPID", &e, 'u', &st->main_pid)) <
		    0 ||
	    (rc = sd_bus_get_property_trivial(r->bus, SD_DEST, path, SD_SERVICE, "ExecMainCode", &e, 'i', &st->code)) <
		    0 ||
	    (rc = sd_bus_get_property_trivial(r->bus, SD_DEST, path, SD_SERVICE, "ExecMainStatus", &e, 'i',
					      &st->status)) < 0)
		goto out;
	snprintf(st->result, sizeof(st->result), "%s", s);
	rc = 0;
out:
	if (rc < 0 && (sd_bus_error_has_name(&e, "org.freedesktop.DBus.Error.UnknownObject") ||
		       sd_bus_error_has_name(&e, "org.freedesktop.systemd1.NoSuchUnit"))) {
		st->found = 0; /* unloaded between GetUnit and the reads: gone */
		rc = 0;
	}
	if (rc < 0)
		rc = bus_fail(err, unit, &e, rc);
	free(s);
	sd_bus_message_unref(reply);
	sd_bus_error_free(&e);
	return rc;
}

static void
call_unit(struct runner *r, const char *method, const char *unit)
{
	sd_bus_error e = SD_BUS_ERROR_NULL;

	if (strcmp(method, "StopUnit") == 0)
		sd_bus_call_method(r->bus, SD_DEST, SD_PATH, SD_MANAGER, method, &e, NULL, "ss", unit, "replace");
	else
		sd_bus_call_method(r->bus, SD_DEST, SD_PATH, SD_MANAGER, method, &e, NULL, "s", unit);
	sd_bus_error_free(&e);
}

/* Exit statuses the service manager itself uses when it could not run
 * the program (systemd.exec(5), "Process Exit Codes"). */
static const char *
manager_exit_meaning(int status)
{
	switch (status) {
	case 200:
		return "the manager could not change to the working directory";
	case 203:
		return "the manager could not execute the engine binary";
	case 204:
		return "the manager ran out of memory starting it";
	case 205:
		return "the manager could not set its resource limits";
	case 209:
		return "the manager could not open its log file";
	case 217:
		return "the manager could not switch to its user";
	case 218:
		return "the manager could not set its capabilities";
	case 219:
		return "the manager could not set up its cgroup";
	case 226:
		return "the manager could not set up its file-system namespace";
	default:
		return NULL;
	}
}

/* A finished unit's end as a wait(2) status, and in words. */
static int
unit_wait_status(const struct unit_state *st, char *why, size_t why_size)
{
	const char *m = NULL;

	if (strcmp(st->result, "oom-kill") == 0)
		m = "the kernel's OOM killer ended it";
	else if (strcmp(st->result, "timeout") == 0)
		m = "the manager timed it out";
	else if (strcmp(st->result, "resources") == 0)
		m = "the manager could not set up its resources";
	else if (st->code == CLD_EXITED)
		m = manager_exit_meaning(st->status);
	snprintf(why, why_size, "%s", m != NULL ? m : "");
	if (st->code == CLD_KILLED || st->code == CLD_DUMPED)
		return st->status & 0x7f;
	return (st->status & 0xff) << 8;
}

/* The units a previous run of this admin left (under systemd they
 * outlive it), into r->left: the supervisor adopts those that still run
 * what it would start, and runner_stop_leftovers() stops the rest. */
static int
list_leftovers(struct runner *r, char *err)
{
	sd_bus_error e = SD_BUS_ERROR_NULL;
	sd_bus_message *m = NULL, *reply = NULL;
	char pattern[80];
	const char *name;
	int rc;

	snprintf(pattern, sizeof(pattern), "privai-engine-%s-*.service", r->tag);
	if ((rc = sd_bus_message_new_method_call(r->bus, &m, SD_DEST, SD_PATH, SD_MANAGER, "ListUnitsByPatterns")) <
		    0 ||
	    (rc = sd_bus_message_append_strv(m, NULL)) < 0 || (rc = sd_bus_message_append(m, "as", 1, pattern)) < 0 ||
	    (rc = sd_bus_call(r->bus, m, 0, &e, &reply)) < 0 ||
	    (rc = sd_bus_message_enter_container(reply, 'a', "(ssssssouso)")) < 0)
		goto out;
	while (r->n_left < MAX_LEFTOVERS && (rc = sd_bus_message_read(reply, "(ssssssouso)", &name, NULL, NULL, NULL,
								      NULL, NULL, NULL, NULL, NULL, NULL)) > 0)
		if ((r->left[r->n_left] = strdup(name)) != NULL)
			r->n_left++;
	if (rc > 0)
		rc = 0;
out:
	if (rc < 0)
		rc = bus_fail(err, "listing this admin's engine units", &e, rc);
	sd_bus_message_unref(m);
	sd_bus_message_unref(reply);
	sd_bus_error_free(&e);
	return rc;
}

void
runner_stop_leftovers(struct runner *r)
{
	char err[APP_ERR_LEN];

	for (int i = 0; i < r->n_left; i++)
		call_unit(r, "StopUnit", r->left[i]);
	for (int i = 0; i < r->n_left; i++) {
		struct unit_state st;
		for (int waited = 0; waited < (int)(STOP_TIMEOUT_US / 1000) + 5000; waited += 50) {
			/* until it is unloaded, not merely inactive: its name must be free to start again */
			if (unit_state(r, r->left[i], &st, err) < 0 || !st.found)
				break;
			if (strcmp(st.active, "failed") == 0)
				call_unit(r, "ResetFailedUnit", r->left[i]);
			sleep_ms(50);
		}
		call_unit(r, "ResetFailedUnit", r->left[i]);
		free(r->left[i]);
	}
	r->n_left = 0;
}

/* The command line the manager runs for unit (its first ExecStart), or NULL. */
static char **
unit_argv(struct runner *r, const char *unit)
{
	sd_bus_error e = SD_BUS_ERROR_NULL;
	sd_bus_message *reply = NULL, *exec = NULL;
	const char *path, *binary;
	char **argv = NULL;

	if (sd_bus_call_method(r->bus, SD_DEST, SD_PATH, SD_MANAGER, "GetUnit", &e, &reply, "s", unit) < 0 ||
	    sd_bus_message_read(reply, "o", &path) < 0 ||
	    sd_bus_get_property(r->bus, SD_DEST, path, SD_SERVICE, "ExecStart", &e, &exec, "a(sasbttttuii)") < 0 ||
	    sd_bus_message_enter_container(exec, 'a', "(sasbttttuii)") <= 0 ||
	    sd_bus_message_enter_container(exec, 'r', "sasbttttuii") <= 0 ||
	    sd_bus_message_read(exec, "s", &binary) < 0 || sd_bus_message_read_strv(exec, &argv) < 0)
		argv = NULL;
	sd_bus_message_unref(exec);
	sd_bus_message_unref(reply);
	sd_bus_error_free(&e);
	return argv;
}

static void
strv_free(char **v)
{
	for (char **p = v; p != NULL && *p != NULL; p++)
		free(*p);
	free(v);
}

int
runner_adopt(struct runner *r, int64_t id, char *const argv[], pid_t *pid, char *why, size_t why_size)
{
	char unit[96], exe[64], target[4200], want[PATH_MAX], err[APP_ERR_LEN];
	struct unit_state st;
	int k = -1, same = 1;
	char **running;

	why[0] = '\0';
	runner_unit_name(r, id, unit, sizeof(unit));
	for (int i = 0; i < r->n_left && k < 0; i++)
		if (strcmp(r->left[i], unit) == 0)
			k = i;
	if (k < 0)
		return 0;
	if (unit_state(r, unit, &st, err) < 0 || !st.found || strcmp(st.active, "active") != 0 || st.main_pid == 0)
		return snprintf(why, why_size, "its unit %s is not running", unit), 0;
	if ((running = unit_argv(r, unit)) == NULL)
		return snprintf(why, why_size, "its unit's command line cannot be read"), 0;
	for (int i = 0; same && (argv[i] != NULL || running[i] != NULL); i++)
		same = argv[i] != NULL && running[i] != NULL && strcmp(argv[i], running[i]) == 0;
	strv_free(running);
	if (!same)
		return snprintf(why, why_size, "its engine runs with other settings; replacing it"), 0;
	/* an upgraded engine binary: the running one is the old code */
	snprintf(exe, sizeof(exe), "/proc/%u/exe", st.main_pid);
	ssize_t n = readlink(exe, target, sizeof(target) - 1);
	target[n > 0 ? n : 0] = '\0';
	if (realpath(argv[0], want) == NULL)
		snprintf(want, sizeof(want), "%s", argv[0]);
	if (n <= 0 || strcmp(target, want) != 0)
		return snprintf(why, why_size, "its engine runs %s, not %s; replacing it",
				n > 0 ? target : "an unreadable binary", argv[0]),
		       0;
	free(r->left[k]);
	r->left[k] = r->left[--r->n_left];
	*pid = (pid_t)st.main_pid;
	return 1;
}

#define USER_BUS_WAIT_S 60 /* a lingering user's manager starting at boot */

static int
open_bus(struct runner *r, enum runner_mode mode, int patient, char *err)
{
	sd_bus_error e = SD_BUS_ERROR_NULL;
	char *version = NULL, dir[64];
	int rc;

	/* A system service (the appliance's privai-admin, user privai with
	 * lingering) has no session: its user manager is at the standard
	 * place, and at boot it may come up a little after us. */
	snprintf(dir, sizeof(dir), "/run/user/%u", (unsigned)getuid());
	if (mode == RUNNER_SYSTEMD_USER && getenv("XDG_RUNTIME_DIR") == NULL &&
	    getenv("DBUS_SESSION_BUS_ADDRESS") == NULL)
		setenv("XDG_RUNTIME_DIR", dir, 0);
	else
		patient = 0; /* a session's manager is there or not: no waiting */
	for (int waited = 0;; waited++) {
		rc = mode == RUNNER_SYSTEMD ? sd_bus_open_system(&r->bus) : sd_bus_open_user(&r->bus);
		if (rc >= 0 || mode != RUNNER_SYSTEMD_USER || !patient || waited >= USER_BUS_WAIT_S ||
		    (rc != -ENOENT && rc != -ECONNREFUSED))
			break;
		sleep(1);
	}

	if (rc < 0)
		return app_fail(err, APP_EUNAVAIL, "cannot connect to the systemd %s bus: %s",
				mode == RUNNER_SYSTEMD ? "system" : "user", strerror(-rc));
	/* a bus without a manager on it is no use: ask the manager something */
	rc = sd_bus_get_property_string(r->bus, SD_DEST, SD_PATH, SD_MANAGER, "Version", &e, &version);
	if (rc < 0) {
		rc = bus_fail(err, "the systemd manager does not answer", &e, rc);
		sd_bus_error_free(&e);
		r->bus = sd_bus_flush_close_unref(r->bus);
		return rc;
	}
	free(version);
	r->mode = mode;
	return APP_OK;
}

int
runner_open(enum runner_mode mode, const char *tag, struct runner **ret, char *note, size_t note_size, char *err)
{
	struct runner *r = calloc(1, sizeof(*r));
	int rc = APP_OK;

	if (r == NULL)
		return app_fail(err, APP_ENOMEM, "out of memory");
	snprintf(r->tag, sizeof(r->tag), "%s", tag);
	r->root = geteuid() == 0;
	r->mode = RUNNER_CHILD;
	note[0] = '\0';
	if (mode == RUNNER_AUTO && sd_booted() > 0) {
		char why[APP_ERR_LEN];
		if (open_bus(r, r->root ? RUNNER_SYSTEMD : RUNNER_SYSTEMD_USER, 0, why) != APP_OK)
			snprintf(note, note_size, "engines run as child processes: %s", why);
	} else if (mode == RUNNER_SYSTEMD || mode == RUNNER_SYSTEMD_USER) {
		rc = open_bus(r, mode, 1, err);
	}
	if (rc == APP_OK && r->bus != NULL)
		rc = list_leftovers(r, err);
	if (rc != APP_OK) {
		runner_close(r);
		return rc;
	}
	*ret = r;
	return APP_OK;
}

void
runner_close(struct runner *r)
{
	if (r == NULL)
		return;
	for (int i = 0; i < r->n_left; i++)
		free(r->left[i]);
	sd_bus_flush_close_unref(r->bus);
	free(r);
}

/* In the child, before exec: say why to the log (write(2) is
 * async-signal-safe) and end. */
static void
child_fail(const char *why)
{
	ssize_t n = write(2, why, strlen(why));

	(void)n;
	_exit(127);
}

/* The child's memory from its CPUs' NUMA node only, as a unit's
 * AllowedMemoryNodes= has it: a policy that exec keeps.  A kernel without
 * NUMA (ENOSYS) has one node anyway. */
static int
bind_memory(int node)
{
	unsigned long mask[16] = { 0 };

	if (node < 0 || node >= (int)(sizeof(mask) * CHAR_BIT))
		return node < 0 ? 0 : -1;
	mask[node / (int)(sizeof(mask[0]) * CHAR_BIT)] = 1UL << (node % (int)(sizeof(mask[0]) * CHAR_BIT));
	if (syscall(SYS_set_mempolicy, MPOL_BIND, mask, sizeof(mask) * CHAR_BIT) != 0 && errno != ENOSYS)
		return -1;
	return 0;
}

static int
start_child(char *const argv[], int log_fd, const struct engine_cpus *cpus, pid_t *pid, char *err)
{
	pid_t parent = getpid();
	pid_t child = fork();

	if (child < 0)
		return app_fail(err, APP_EIO, "fork: %s", strerror(errno));
	if (child == 0) {
		/* only async-signal-safe calls from here to exec */
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != parent)
			_exit(127);
		int devnull = open("/dev/null", O_RDONLY);
		dup2(devnull, 0);
		dup2(log_fd, 1);
		dup2(log_fd, 2);
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		if (CPU_COUNT(&cpus->set) > 0 && sched_setaffinity(0, sizeof(cpus->set), &cpus->set) != 0)
			child_fail("privai-admin: the engine's CPUs could not be set (sched_setaffinity)\n");
		if (CPU_COUNT(&cpus->set) > 0 && bind_memory(cpus->node) != 0)
			child_fail("privai-admin: the engine's memory could not be bound to its NUMA node "
				   "(set_mempolicy)\n");
		execv(argv[0], argv);
		child_fail("privai-admin: the engine could not be executed (execv)\n");
	}
	*pid = child;
	return APP_OK;
}

/* The unit's ExecStart: one command, failure of which fails the unit. */
static int
append_exec_start(sd_bus_message *m, char *const argv[])
{
	int rc;

	if ((rc = sd_bus_message_open_container(m, 'r', "sv")) < 0 ||
	    (rc = sd_bus_message_append(m, "s", "ExecStart")) < 0 ||
	    (rc = sd_bus_message_open_container(m, 'v', "a(sasb)")) < 0 ||
	    (rc = sd_bus_message_open_container(m, 'a', "(sasb)")) < 0 ||
	    (rc = sd_bus_message_open_container(m, 'r', "sasb")) < 0 ||
	    (rc = sd_bus_message_append(m, "s", argv[0])) < 0 ||
	    (rc = sd_bus_message_append_strv(m, (char **)argv)) < 0 || (rc = sd_bus_message_append(m, "b", 0)) < 0)
		return rc;
	for (int i = 0; i < 4; i++)
		if ((rc = sd_bus_message_close_container(m)) < 0)
			return rc;
	return 0;
}

/* Hardening (systemd.exec(5)).  The engine reads its model and key file
 * and writes only its log, which the manager opens for it, so the whole
 * file system is read-only to it.  No PrivateTmp=: a state directory or
 * model root under /tmp (a test, a trial) must stay visible.  Namespaces
 * and a raised memlock limit (pinned host memory for GPU transfers) need
 * a manager running as root; an unprivileged user manager gets what it
 * can enforce.  ProtectKernelTunables= is left out: remounting /proc/sys
 * fails in some container sandboxes (exit 226), and this set is the one
 * the suite runs under a real manager. */
/* A CPU or NUMA node set as systemd takes it: a bit mask in bytes, CPU
 * 8i + j as bit j of byte i. */
static int
append_mask(sd_bus_message *m, const char *name, const cpu_set_t *set)
{
	uint8_t bytes[CPU_SETSIZE / 8] = { 0 };
	size_t len = 0;
	int rc;

	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, set)) {
			bytes[c / 8] |= (uint8_t)(1u << (c % 8));
			len = (size_t)c / 8 + 1;
		}
	if ((rc = sd_bus_message_open_container(m, 'r', "sv")) < 0 || (rc = sd_bus_message_append(m, "s", name)) < 0 ||
	    (rc = sd_bus_message_open_container(m, 'v', "ay")) < 0 ||
	    (rc = sd_bus_message_append_array(m, 'y', bytes, len)) < 0 || (rc = sd_bus_message_close_container(m)) < 0)
		return rc;
	return sd_bus_message_close_container(m);
}

/* The engine's CPUs: CPUAffinity= works under any manager; AllowedCPUs=
 * (a cgroup's cpuset, which the engine cannot widen) where the manager
 * has the cpuset controller, and its NUMA node's memory with it. */
static int
append_cpus(sd_bus_message *m, const struct engine_cpus *cpus)
{
	int rc;

	if (CPU_COUNT(&cpus->set) == 0)
		return 0;
	if ((rc = append_mask(m, "CPUAffinity", &cpus->set)) < 0 ||
	    (rc = append_mask(m, "AllowedCPUs", &cpus->set)) < 0)
		return rc;
	if (cpus->node >= 0) {
		cpu_set_t nodes;
		CPU_ZERO(&nodes);
		CPU_SET(cpus->node, &nodes);
		return append_mask(m, "AllowedMemoryNodes", &nodes);
	}
	return 0;
}

static int
append_properties(struct runner *r, sd_bus_message *m, const char *description, const char *log_path)
{
	int rc = sd_bus_message_append(m, "(sv)(sv)(sv)(sv)(sv)(sv)(sv)(sv)", "Description", "s", description, "Type",
				       "s", "exec", "StandardOutputFileToAppend", "s", log_path,
				       "StandardErrorFileToAppend", "s", log_path, "TimeoutStopUSec", "t",
				       (uint64_t)STOP_TIMEOUT_US, "NoNewPrivileges", "b", 1, "RestrictSUIDSGID", "b", 1,
				       "Slice", "s", "privai.slice");
	if (rc < 0 || !r->root)
		return rc;
	rc = sd_bus_message_append(m, "(sv)(sv)(sv)(sv)(sv)(sv)(sv)", "ProtectSystem", "s", "strict", "ProtectHome",
				   "s", "read-only", "ProtectKernelModules", "b", 1, "ProtectControlGroups", "b", 1,
				   "LockPersonality", "b", 1, "LimitMEMLOCK", "t", UINT64_MAX, "LimitMEMLOCKSoft", "t",
				   UINT64_MAX);
	if (rc < 0 || r->mode != RUNNER_SYSTEMD)
		return rc;
	/* the system manager would run it as root: run it as whoever runs privai-admin */
	char uid[24];
	snprintf(uid, sizeof(uid), "%u", (unsigned)getuid());
	return sd_bus_message_append(m, "(sv)", "User", "s", uid);
}

/* One StartTransientUnit call: <0 with e set when the manager refuses. */
static int
call_start(struct runner *r, const char *unit, const char *description, char *const argv[], const char *log_path,
	   const struct engine_cpus *cpus, sd_bus_error *e)
{
	sd_bus_message *m = NULL;
	int rc;

	if ((rc = sd_bus_message_new_method_call(r->bus, &m, SD_DEST, SD_PATH, SD_MANAGER, "StartTransientUnit")) >=
		    0 &&
	    (rc = sd_bus_message_append(m, "ss", unit, "fail")) >= 0 &&
	    (rc = sd_bus_message_open_container(m, 'a', "(sv)")) >= 0 &&
	    (rc = append_properties(r, m, description, log_path)) >= 0 && (rc = append_cpus(m, cpus)) >= 0 &&
	    (rc = append_exec_start(m, argv)) >= 0 && (rc = sd_bus_message_close_container(m)) >= 0 &&
	    (rc = sd_bus_message_append(m, "a(sa(sv))", 0)) >= 0)
		rc = sd_bus_call(r->bus, m, 0, e, NULL);
	sd_bus_message_unref(m);
	return rc;
}

/* Type=exec: the start job ends once the binary is executing, or the
 * unit fails.  On failure the unit is stopped: none is left running that
 * the supervisor does not track. */
static int
await_start(struct runner *r, const char *unit, pid_t *pid, char *err)
{
	struct unit_state st;
	char why[160];

	for (int waited = 0; waited < START_WAIT_MS; waited += 20, sleep_ms(20)) {
		if (unit_state(r, unit, &st, err) < 0)
			continue; /* the manager is busy; ask again */
		if (st.found && strcmp(st.active, "active") == 0 && st.main_pid > 0) {
			*pid = (pid_t)st.main_pid;
			return APP_OK;
		}
		int ended = strcmp(st.active, "failed") == 0 || strcmp(st.active, "inactive") == 0;
		if (!st.found || (ended && st.job == 0)) {
			int status = unit_wait_status(&st, why, sizeof(why));
			call_unit(r, "ResetFailedUnit", unit);
			if (why[0] == '\0')
				snprintf(why, sizeof(why), "it ended as it started (%s %d)",
					 WIFEXITED(status) ? "exit status" : "signal",
					 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
			return app_fail(err, APP_EIO, "%s did not start: %s", unit, why);
		}
	}
	call_unit(r, "StopUnit", unit);
	return app_fail(err, APP_EIO, "%s did not start within %d s; stopped it", unit, START_WAIT_MS / 1000);
}

static int
start_unit(struct runner *r, int64_t id, const char *description, char *const argv[], const char *log_path,
	   const struct engine_cpus *cpus, pid_t *pid, char *err)
{
	sd_bus_error e = SD_BUS_ERROR_NULL;
	char unit[96];
	int rc;

	runner_unit_name(r, id, unit, sizeof(unit));
	call_unit(r, "ResetFailedUnit", unit); /* a failed unit of that name would block the start */
	/* A stopped unit of that name may not be unloaded yet (the manager
	 * collects it a moment later): wait for that, not for a running one. */
	for (int tries = 0; (rc = call_start(r, unit, description, argv, log_path, cpus, &e)) < 0 && tries < 50;
	     tries++) {
		struct unit_state st;
		char ignored[APP_ERR_LEN];
		if (!sd_bus_error_has_name(&e, "org.freedesktop.systemd1.UnitExists") ||
		    unit_state(r, unit, &st, ignored) < 0 ||
		    (st.found && strcmp(st.active, "inactive") != 0 && strcmp(st.active, "failed") != 0))
			break;
		call_unit(r, "ResetFailedUnit", unit);
		sd_bus_error_free(&e);
		sleep_ms(100);
	}
	if (rc < 0) {
		rc = bus_fail(err, unit, &e, rc);
		sd_bus_error_free(&e);
		return rc;
	}
	return await_start(r, unit, pid, err);
}

int
runner_start(struct runner *r, int64_t id, const char *description, char *const argv[], const char *log_path,
	     int log_fd, const struct engine_cpus *cpus, pid_t *pid, char *err)
{
	if (r->bus == NULL)
		return start_child(argv, log_fd, cpus, pid, err);
	return start_unit(r, id, description, argv, log_path, cpus, pid, err);
}

int
runner_wait(struct runner *r, int64_t id, pid_t pid, int *status, char *why, size_t why_size, char *err)
{
	struct unit_state st;
	char unit[96];

	why[0] = '\0';
	if (r->bus == NULL) {
		pid_t got = waitpid(pid, status, WNOHANG);
		if (got == pid)
			return 0;
		if (got == 0)
			return 1;
		return app_fail(err, APP_EIO, "waitpid %d: %s", (int)pid, strerror(errno));
	}
	runner_unit_name(r, id, unit, sizeof(unit));
	if (unit_state(r, unit, &st, err) < 0)
		return APP_EIO;
	if (!st.found) { /* collected: it exited cleanly, or was stopped outside privai */
		*status = 0;
		snprintf(why, why_size, "its unit %s is gone", unit);
		return 0;
	}
	if ((strcmp(st.active, "failed") != 0 && strcmp(st.active, "inactive") != 0) || st.job != 0)
		return 1;
	*status = unit_wait_status(&st, why, why_size);
	call_unit(r, "ResetFailedUnit", unit);
	return 0;
}

int
runner_signal(struct runner *r, int64_t id, pid_t pid, int sig, char *err)
{
	sd_bus_error e = SD_BUS_ERROR_NULL;
	char unit[96];
	int rc;

	if (r->bus == NULL) {
		if (kill(pid, sig) != 0 && errno != ESRCH)
			return app_fail(err, APP_EIO, "kill %d: %s", (int)pid, strerror(errno));
		return APP_OK;
	}
	runner_unit_name(r, id, unit, sizeof(unit));
	rc = sd_bus_call_method(r->bus, SD_DEST, SD_PATH, SD_MANAGER, "KillUnit", &e, NULL, "ssi", unit,
				sig == SIGHUP ? "main" : "all", sig);
	if (rc < 0 && !sd_bus_error_has_name(&e, "org.freedesktop.systemd1.NoSuchUnit"))
		rc = bus_fail(err, unit, &e, rc);
	else
		rc = APP_OK;
	sd_bus_error_free(&e);
	return rc;
}

int64_t
runner_started_at(pid_t pid)
{
	char path[64], buf[1024], *p;
	long long btime = -1, ticks = -1;
	FILE *f;

	/* /proc/PID/stat field 22 is the start in clock ticks after boot;
	 * the command name (field 2) may hold spaces, so count after ')' */
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if ((f = fopen(path, "re")) == NULL)
		return APP_ENOTFOUND;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	if ((p = strrchr(buf, ')')) == NULL ||
	    sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %lld",
		   &ticks) != 1)
		return APP_ENOTFOUND;
	if ((f = fopen("/proc/stat", "re")) == NULL)
		return APP_ENOTFOUND;
	while (fgets(buf, sizeof(buf), f) != NULL)
		if (sscanf(buf, "btime %lld", &btime) == 1)
			break;
	fclose(f);
	long hz = sysconf(_SC_CLK_TCK);
	return btime < 0 || ticks < 0 || hz <= 0 ? APP_ENOTFOUND : (int64_t)(btime + ticks / hz);
}
