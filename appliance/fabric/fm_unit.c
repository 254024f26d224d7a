/* Fabric Manager's unit over sd-bus. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "status.h"
#include "fm_unit.h"

#define SD_DEST "org.freedesktop.systemd1"
#define SD_PATH "/org/freedesktop/systemd1"
#define SD_MANAGER "org.freedesktop.systemd1.Manager"
#define SD_UNIT "org.freedesktop.systemd1.Unit"
#define SD_SERVICE "org.freedesktop.systemd1.Service"
#define POLL_MS 100

static int
bus_fail(char *err, size_t errsize, const char *what, const sd_bus_error *e, int rc)
{
	snprintf(err, errsize, "%s: %s", what, sd_bus_error_is_set(e) ? e->message : strerror(rc < 0 ? -rc : rc));
	return APP_EIO;
}

int
fm_bus_open(int user, sd_bus **bus, char *err, size_t errsize)
{
	int rc = user ? sd_bus_open_user(bus) : sd_bus_open_system(bus);

	if (rc < 0) {
		snprintf(err, errsize, "cannot reach the systemd %s manager's bus: %s", user ? "user" : "system",
			 strerror(-rc));
		*bus = NULL;
		return APP_EIO;
	}
	return 0;
}

static int
get_string(sd_bus *bus, const char *path, const char *iface, const char *name, char *out, size_t size, sd_bus_error *e)
{
	char *s = NULL;
	int rc = sd_bus_get_property_string(bus, SD_DEST, path, iface, name, e, &s);

	if (rc >= 0)
		snprintf(out, size, "%s", s);
	free(s);
	return rc;
}

int
fm_unit_read(sd_bus *bus, const char *unit, struct fm_unit_state *st, char *err, size_t errsize)
{
	sd_bus_error e = SD_BUS_ERROR_NULL;
	sd_bus_message *reply = NULL;
	const char *p;
	char path[256];
	int rc;

	memset(st, 0, sizeof(*st));
	/* LoadUnit answers for units that are not loaded yet, and says "not-found" for missing ones */
	rc = sd_bus_call_method(bus, SD_DEST, SD_PATH, SD_MANAGER, "LoadUnit", &e, &reply, "s", unit);
	if (rc < 0 || (rc = sd_bus_message_read(reply, "o", &p)) < 0)
		goto out;
	snprintf(path, sizeof(path), "%s", p);
	if ((rc = get_string(bus, path, SD_UNIT, "LoadState", st->load, sizeof(st->load), &e)) < 0)
		goto out;
	/* A unit whose start job has not run yet is still "inactive": the job
	 * tells them apart.  The properties are read one call at a time, so
	 * the job is read first: once it is gone, the state read after it is
	 * the job's outcome, not the gap between a restart's stop and start. */
	sd_bus_message *job = NULL;
	const char *job_path;
	if (strcmp(st->load, "loaded") == 0) {
		if ((rc = sd_bus_get_property(bus, SD_DEST, path, SD_UNIT, "Job", &e, &job, "(uo)")) >= 0)
			rc = sd_bus_message_read(job, "(uo)", &st->job, &job_path);
		sd_bus_message_unref(job);
		if (rc < 0)
			goto out;
	}
	if ((rc = get_string(bus, path, SD_UNIT, "ActiveState", st->active, sizeof(st->active), &e)) < 0 ||
	    (rc = get_string(bus, path, SD_UNIT, "SubState", st->sub, sizeof(st->sub), &e)) < 0)
		goto out;
	if (strcmp(st->load, "loaded") != 0)
		goto out;
	if ((rc = get_string(bus, path, SD_SERVICE, "Result", st->result, sizeof(st->result), &e)) < 0 ||
	    (rc = sd_bus_get_property_trivial(bus, SD_DEST, path, SD_SERVICE, "NRestarts", &e, 'u', &st->n_restarts)) <
		    0 ||
	    (rc = sd_bus_get_property_trivial(bus, SD_DEST, path, SD_SERVICE, "MainPID", &e, 'u', &st->main_pid)) < 0 ||
	    (rc = sd_bus_get_property_trivial(bus, SD_DEST, path, SD_SERVICE, "ExecMainCode", &e, 'i',
					      &st->exit_code)) < 0 ||
	    (rc = sd_bus_get_property_trivial(bus, SD_DEST, path, SD_SERVICE, "ExecMainStatus", &e, 'i',
					      &st->exit_status)) < 0)
		goto out;
out:
	sd_bus_message_unref(reply);
	if (rc < 0)
		bus_fail(err, errsize, unit, &e, rc);
	sd_bus_error_free(&e);
	return rc < 0 ? APP_EIO : APP_OK;
}

int
fm_unit_job(sd_bus *bus, const char *unit, const char *method, char *err, size_t errsize)
{
	sd_bus_error e = SD_BUS_ERROR_NULL;
	sd_bus_message *reply = NULL;
	int rc = sd_bus_call_method(bus, SD_DEST, SD_PATH, SD_MANAGER, method, &e, &reply, "ss", unit, "replace");

	if (rc < 0) {
		char what[200];
		snprintf(what, sizeof(what), "%s %s", method, unit);
		bus_fail(err, errsize, what, &e, rc);
	}
	sd_bus_message_unref(reply);
	sd_bus_error_free(&e);
	return rc < 0 ? APP_EIO : APP_OK;
}

long long
fm_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

int
fm_unit_wait(sd_bus *bus, const char *unit, int want_active, int timeout_ms, int settle_ms, struct fm_unit_state *st,
	     char *err, size_t errsize)
{
	long long start = fm_now_ms(), active_since = -1;
	uint32_t restarts0 = 0;
	int first = 1;

	for (;;) {
		if (fm_unit_read(bus, unit, st, err, errsize) < 0)
			return APP_EIO;
		/* a start job resets NRestarts when it runs, which may be after our first look */
		if (first || st->n_restarts < restarts0)
			restarts0 = st->n_restarts;
		first = 0;
		if (strcmp(st->load, "loaded") != 0)
			return FM_FAILED;
		if (want_active) {
			if (strcmp(st->sub, "auto-restart") == 0 || st->n_restarts > restarts0)
				return FM_RESTART_LOOP;
			if (st->job == 0 && (strcmp(st->active, "failed") == 0 || strcmp(st->active, "inactive") == 0))
				return strcmp(st->result, "start-limit-hit") == 0 ? FM_RESTART_LOOP : FM_FAILED;
			if (strcmp(st->active, "active") == 0) {
				if (active_since < 0)
					active_since = fm_now_ms();
				if (fm_now_ms() - active_since >= settle_ms)
					return FM_READY;
			} else {
				active_since = -1;
			}
		} else if (st->job == 0 && (strcmp(st->active, "inactive") == 0 || strcmp(st->active, "failed") == 0)) {
			return FM_STOPPED;
		}
		if (fm_now_ms() - start >= timeout_ms)
			return FM_TIMEOUT;
		sleep_ms(POLL_MS);
	}
}

const char *
fm_wait_name(int outcome)
{
	switch (outcome) {
	case FM_READY:
		return "ready";
	case FM_STOPPED:
		return "stopped";
	case FM_FAILED:
		return "failed";
	case FM_RESTART_LOOP:
		return "restart loop";
	case FM_TIMEOUT:
		return "timed out";
	default:
		return "error";
	}
}
