/*
 * Fabric Manager's state as privai-fabric reports it (fm status, and the
 * status socket privai-admin reads): whether the node needs it, the
 * package's and the driver's versions, the unit's state, and the verdict:
 * ready, or what is wrong (not installed, version mismatch, restart loop,
 * failed, stopped).
 */
#ifndef PRIVAI_FM_STATUS_H
#define PRIVAI_FM_STATUS_H

#include <cjson/cJSON.h>

#include "fabric.h"
#include "fm_unit.h"
#include "settings.h"

struct fm_status {
	int needed; /* NVSwitches present */
	int version_mismatch;
	int unit_known; /* the manager answered */
	struct fm_unit_state unit;
	int restart_loop;
	char verdict[24]; /* "ready", "not-needed", "not-installed", "version-mismatch", "restart-loop", "failed", "stopped", "starting", "unknown" */
	char problem[256]; /* what to do, "" when ready or not needed */
};

/* Judge from what was read.  unit NULL: the manager could not be asked
 * (why in bus_err); restart_loop: seen by the caller over time. */
void fm_status_judge(const struct fabric *f, const struct fabric_settings *s, const struct fm_unit_state *unit,
		     const char *bus_err, int restart_loop, struct fm_status *out);

cJSON *fm_status_json(const struct fabric *f, const struct fabric_settings *s, const struct fm_status *st);

#endif
