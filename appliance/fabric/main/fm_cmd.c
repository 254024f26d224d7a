/* fm-config and fm start|stop|restart|status. */
#include <stdio.h>
#include <string.h>

#include "fabric.h"
#include "fabric_cmd.h"
#include "fm_config.h"
#include "fm_status.h"
#include "fm_unit.h"

#define SETTLE_MS 3000

int
cmd_fm_config(struct fabric_opts *o, int argc, char **argv)
{
	char err[320];
	int dry = 0, changed;

	for (int i = 0; i < argc; i++) {
		if (strcmp(argv[i], "--dry-run") == 0)
			dry = 1;
		else
			return fabric_usage_error("fm-config", argv[i]);
	}
	if (fm_config_apply(o->root, &o->s, dry, &changed, err, sizeof(err)) < 0)
		return fabric_fail("fm-config", err);
	printf("%s: %d value%s %s (FABRIC_MODE=%d, %s)\n", o->s.fm_config, changed, changed == 1 ? "" : "s",
	       changed == 0 ? "to change"
	       : dry        ? "would change"
			    : "changed",
	       o->s.mode, fabric_mode_name(o->s.mode));
	return 0;
}

static int
print_status(struct fabric_opts *o, const struct fabric *f, sd_bus *bus, const char *bus_err, int json)
{
	struct fm_unit_state unit;
	struct fm_status st;
	char err[320] = "";
	int have = bus != NULL && fm_unit_read(bus, o->s.fm_unit, &unit, err, sizeof(err)) == 0;

	fm_status_judge(f, &o->s, have ? &unit : NULL, bus_err ? bus_err : err, 0, &st);
	if (json) {
		cJSON *j = fm_status_json(f, &o->s, &st);
		fabric_print_json(j);
		cJSON_Delete(j);
	} else {
		printf("Fabric Manager: %s%s%s\n", st.verdict, st.problem[0] ? ": " : "", st.problem);
		if (have)
			printf("  %s %s (%s), %u restarts, version %s, driver %s\n", o->s.fm_unit, unit.active,
			       unit.sub, unit.n_restarts, f->fm_version[0] ? f->fm_version : "unknown",
			       f->driver_version[0] ? f->driver_version : "not loaded");
	}
	return strcmp(st.verdict, "ready") == 0 || strcmp(st.verdict, "not-needed") == 0 ? 0 : 1;
}

/* Start (or restart) and wait: the verdict on what the unit did. */
static int
start(struct fabric_opts *o, const struct fabric *f, sd_bus *bus, const char *method, int force)
{
	struct fm_unit_state unit;
	char err[320];
	int changed, outcome;

	if (f->topo.n_nvswitches == 0 && !force) {
		printf("Fabric Manager: not needed (no NVSwitch on this node); not started\n");
		return 0;
	}
	if (f->fm_version[0] && f->driver_version[0] && strcmp(f->fm_version, f->driver_version) != 0 && !force) {
		fprintf(stderr,
			"privai-fabric fm: Fabric Manager %s does not match driver %s; it would refuse to run. "
			"Install nvidia-fabricmanager %s (or --force)\n",
			f->fm_version, f->driver_version, f->driver_version);
		return 1;
	}
	if (fm_config_apply(o->root, &o->s, 0, &changed, err, sizeof(err)) < 0)
		return fabric_fail("fm", err);
	if (fm_unit_read(bus, o->s.fm_unit, &unit, err, sizeof(err)) < 0)
		return fabric_fail("fm", err);
	if (strcmp(unit.load, "loaded") != 0) {
		fprintf(stderr, "privai-fabric fm: %s is %s: install nvidia-fabricmanager\n", o->s.fm_unit, unit.load);
		return 1;
	}
	/* a changed config only takes effect on a restart */
	if (strcmp(method, "StartUnit") == 0 && changed > 0 && strcmp(unit.active, "active") == 0)
		method = "RestartUnit";
	if (fm_unit_job(bus, o->s.fm_unit, method, err, sizeof(err)) < 0)
		return fabric_fail("fm", err);
	outcome = fm_unit_wait(bus, o->s.fm_unit, 1, o->s.ready_timeout_s * 1000, SETTLE_MS, &unit, err, sizeof(err));
	if (outcome < 0)
		return fabric_fail("fm", err);
	printf("Fabric Manager: %s (%s %s/%s, %u restarts, config %s%s)\n", fm_wait_name(outcome), o->s.fm_unit,
	       unit.active, unit.sub, unit.n_restarts, o->s.fm_config, changed ? " updated" : " unchanged");
	if (outcome == FM_RESTART_LOOP || outcome == FM_FAILED)
		fprintf(stderr, "privai-fabric fm: %s %s (last exit status %d); its log is %s\n", o->s.fm_unit,
			outcome == FM_RESTART_LOOP ? "keeps restarting" : "failed", unit.exit_status, o->s.log_file);
	return outcome == FM_READY ? 0 : 1;
}

int
cmd_fm(struct fabric_opts *o, int argc, char **argv)
{
	const char *action = argc > 0 ? argv[0] : NULL;
	struct fabric f;
	sd_bus *bus = NULL;
	char err[320], bus_err[320] = "";
	int json = 0, force = 0, rc;

	if (action == NULL)
		return fabric_usage_error("fm", "(nothing): start, stop, restart or status");
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0)
			json = 1;
		else if (strcmp(argv[i], "--force") == 0)
			force = 1;
		else
			return fabric_usage_error("fm", argv[i]);
	}
	if (strcmp(action, "start") != 0 && strcmp(action, "stop") != 0 && strcmp(action, "restart") != 0 &&
	    strcmp(action, "status") != 0)
		return fabric_usage_error("fm", action);
	if (fabric_read(o->root, fabric_live(o), &f, err, sizeof(err)) < 0)
		return fabric_fail("fm", err);
	if (fm_bus_open(o->s.user_bus, &bus, bus_err, sizeof(bus_err)) < 0 && strcmp(action, "status") != 0) {
		fabric_free(&f);
		return fabric_fail("fm", bus_err);
	}
	if (strcmp(action, "status") == 0) {
		rc = print_status(o, &f, bus, bus ? NULL : bus_err, json);
	} else if (strcmp(action, "stop") == 0) {
		struct fm_unit_state unit;
		int outcome = -1;
		if (fm_unit_job(bus, o->s.fm_unit, "StopUnit", err, sizeof(err)) == 0)
			outcome = fm_unit_wait(bus, o->s.fm_unit, 0, 90 * 1000, 0, &unit, err, sizeof(err));
		if (outcome < 0)
			rc = fabric_fail("fm stop", err);
		else {
			printf("Fabric Manager: %s\n", fm_wait_name(outcome));
			rc = outcome == FM_STOPPED ? 0 : 1;
		}
	} else {
		rc = start(o, &f, bus, strcmp(action, "start") == 0 ? "StartUnit" : "RestartUnit", force);
	}
	sd_bus_flush_close_unref(bus);
	fabric_free(&f);
	return rc;
}
