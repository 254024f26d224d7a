/*
 * Fabric Manager's systemd unit through sd-bus: its state as the manager
 * reports it, start/stop/restart jobs, and waiting for it to be ready.
 * Ready means active and still active, without a restart, after a settle
 * period: a Fabric Manager that cannot train the fabric (a version
 * mismatch with the driver, a failed NVSwitch) exits during start-up, and
 * with Restart= set it cycles instead of failing, which is what the
 * restart-loop detection catches.
 */
#ifndef PRIVAI_FM_UNIT_H
#define PRIVAI_FM_UNIT_H

#include <stddef.h>
#include <stdint.h>
#include <systemd/sd-bus.h>

struct fm_unit_state {
	char load[16];       /* LoadState: loaded, not-found, masked, ... */
	char active[16];     /* ActiveState: active, activating, failed, inactive, ... */
	char sub[32];        /* SubState: running, auto-restart, dead, ... */
	char result[32];     /* the service's Result: success, exit-code, start-limit-hit, ... */
	uint32_t n_restarts; /* NRestarts: automatic restarts since the last start job */
	uint32_t main_pid;
	uint32_t job;                   /* a queued or running job's id, 0 none */
	int32_t exit_code, exit_status; /* ExecMainCode (CLD_*), ExecMainStatus */
};

enum fm_wait {
	FM_READY,
	FM_STOPPED,
	FM_FAILED,       /* failed, or gone inactive */
	FM_RESTART_LOOP, /* restarting by itself */
	FM_TIMEOUT,
};

/* The system manager's bus, or the user manager's (tests).  0, or an APP_E* code with err. */
int fm_bus_open(int user, sd_bus **bus, char *err, size_t errsize);

int fm_unit_read(sd_bus *bus, const char *unit, struct fm_unit_state *st, char *err, size_t errsize);

/* "StartUnit", "StopUnit" or "RestartUnit" with mode "replace".  0, or an APP_E* code with err. */
int fm_unit_job(sd_bus *bus, const char *unit, const char *method, char *err, size_t errsize);

/* Wait for the unit to become ready (want_active) or stopped; st holds
 * the last state seen.  An FM_* outcome, or APP_EIO with err on a bus error. */
int fm_unit_wait(sd_bus *bus, const char *unit, int want_active, int timeout_ms, int settle_ms,
		 struct fm_unit_state *st, char *err, size_t errsize);

const char *fm_wait_name(int outcome);

/* Milliseconds on the monotonic clock: privai-fabric's waits and deadlines. */
long long fm_now_ms(void);

#endif
