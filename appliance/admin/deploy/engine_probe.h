/*
 * What this node's privai-engine can run on, asked once at start with
 * `privai-engine features --json` and reported with the node's inventory
 * as "engine": {"backends": ["cpu", ...], "cpu_simd": "..."}.  GPU
 * placements go only to nodes whose engine lists "cuda".
 */
#ifndef PRIVAI_ADMIN_ENGINE_PROBE_H
#define PRIVAI_ADMIN_ENGINE_PROBE_H

#include <cjson/cJSON.h>

/* The engine's features, checked and rebuilt by engine_report_clean; an
 * engine that cannot say (missing, too old, hung for 10 s) gets
 * {"backends": [], "error": WHY}.  NULL only when out of memory. */
cJSON *engine_probe(const char *engine_bin);

/* An "engine" object from a report, as another node sent it: only its
 * known fields, checked; a bad one becomes {"backends": [], "error": ...}
 * rather than refusing the heartbeat.  NULL only when out of memory. */
cJSON *engine_report_clean(const cJSON *e);

#endif
