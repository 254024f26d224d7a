/* Judging Fabric Manager's state. */
#include <stdio.h>
#include <string.h>

#include "status.h"
#include "strfmt.h"
#include "fm_status.h"

static void
verdict(struct fm_status *st, const char *v, const char *problem)
{
	snprintf(st->verdict, sizeof(st->verdict), "%s", v);
	snprintf(st->problem, sizeof(st->problem), "%s", problem);
}

void
fm_status_judge(const struct fabric *f, const struct fabric_settings *s, const struct fm_unit_state *unit,
		const char *bus_err, int restart_loop, struct fm_status *st)
{
	char msg[256];

	memset(st, 0, sizeof(*st));
	st->needed = f->topo.n_nvswitches > 0;
	st->version_mismatch =
		f->fm_version[0] && f->driver_version[0] && strcmp(f->fm_version, f->driver_version) != 0;
	st->restart_loop = restart_loop;
	if (unit != NULL) {
		st->unit = *unit;
		st->unit_known = 1;
		if (strcmp(unit->sub, "auto-restart") == 0 || strcmp(unit->result, "start-limit-hit") == 0)
			st->restart_loop = 1;
	}
	if (!st->needed) {
		verdict(st, "not-needed", "");
	} else if (st->version_mismatch) {
		msg_fmt(msg, sizeof(msg),
			"Fabric Manager %s with driver %s: it refuses to run; install "
			"nvidia-fabricmanager %s",
			f->fm_version, f->driver_version, f->driver_version);
		verdict(st, "version-mismatch", msg);
	} else if (unit == NULL) {
		msg_fmt(msg, sizeof(msg), "systemd cannot be asked: %s", bus_err ? bus_err : "unknown error");
		verdict(st, "unknown", msg);
	} else if (strcmp(unit->load, "loaded") != 0) {
		msg_fmt(msg, sizeof(msg), "%s is %s: install nvidia-fabricmanager of the driver's version (%s)",
			s->fm_unit, unit->load, f->driver_version[0] ? f->driver_version : "no driver loaded");
		verdict(st, "not-installed", msg);
	} else if (st->restart_loop) {
		msg_fmt(msg, sizeof(msg), "%s keeps restarting (%u restarts, last exit status %d): see %s", s->fm_unit,
			unit->n_restarts, unit->exit_status, s->log_file);
		verdict(st, "restart-loop", msg);
	} else if (strcmp(unit->active, "active") == 0) {
		verdict(st, "ready", "");
	} else if (strcmp(unit->active, "activating") == 0 || strcmp(unit->active, "reloading") == 0) {
		verdict(st, "starting", "");
	} else if (strcmp(unit->active, "failed") == 0) {
		msg_fmt(msg, sizeof(msg), "%s failed (%s, exit status %d): see %s, then privai-fabric fm start",
			s->fm_unit, unit->result, unit->exit_status, s->log_file);
		verdict(st, "failed", msg);
	} else {
		msg_fmt(msg, sizeof(msg),
			"%s is %s: privai-fabric fm start; CUDA reports 'system not ready' until it has "
			"trained the fabric",
			s->fm_unit, unit->active);
		verdict(st, "stopped", msg);
	}
}

cJSON *
fm_status_json(const struct fabric *f, const struct fabric_settings *s, const struct fm_status *st)
{
	cJSON *o = cJSON_CreateObject();

	cJSON_AddStringToObject(o, "verdict", st->verdict);
	cJSON_AddBoolToObject(o, "ready", strcmp(st->verdict, "ready") == 0);
	cJSON_AddBoolToObject(o, "needed", st->needed);
	cJSON_AddNumberToObject(o, "nvswitches", f->topo.n_nvswitches);
	cJSON_AddStringToObject(o, "problem", st->problem);
	cJSON_AddStringToObject(o, "unit", s->fm_unit);
	cJSON_AddStringToObject(o, "version", f->fm_version);
	cJSON_AddStringToObject(o, "driver_version", f->driver_version);
	cJSON_AddBoolToObject(o, "version_mismatch", st->version_mismatch);
	cJSON_AddStringToObject(o, "mode", fabric_mode_name(s->mode));
	cJSON_AddStringToObject(o, "config", s->fm_config);
	cJSON_AddBoolToObject(o, "restart_loop", st->restart_loop);
	if (st->unit_known) {
		cJSON *u = cJSON_AddObjectToObject(o, "state");
		cJSON_AddStringToObject(u, "load", st->unit.load);
		cJSON_AddStringToObject(u, "active", st->unit.active);
		cJSON_AddStringToObject(u, "sub", st->unit.sub);
		cJSON_AddStringToObject(u, "result", st->unit.result);
		cJSON_AddNumberToObject(u, "restarts", st->unit.n_restarts);
		cJSON_AddNumberToObject(u, "main_pid", st->unit.main_pid);
		cJSON_AddNumberToObject(u, "exit_status", st->unit.exit_status);
	}
	return o;
}
