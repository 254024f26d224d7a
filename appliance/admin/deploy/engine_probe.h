/*
 * What this node's privai-engine can run on, asked at start with
 * `privai-engine features --json` and reported with the node's inventory
 * as "engine": {"backends": ["cpu", ...], "cpu_simd": "..."}.  GPU
 * placements go only to nodes whose engine lists "cuda".
 */
#ifndef PRIVAI_ADMIN_ENGINE_PROBE_H
#define PRIVAI_ADMIN_ENGINE_PROBE_H

#include <cjson/cJSON.h>

/* The engine's features, checked and rebuilt by engine_report_clean; an
 * engine that cannot say (missing, too old, silent for 60 s) gets
 * {"backends": [], "error": WHY}.  NULL only when out of memory. */
cJSON *engine_probe(const char *engine_bin);

struct admin;
/* After a start-up probe that failed: a thread that asks the engine again
 * every cfg.engine_retry_s seconds and, once it answers, puts its features
 * in a->engine (the failed report is kept until exit, as a reader may hold
 * it) and ends.  APP_OK or APP_EIO. */
int engine_watch_start(struct admin *a);
/* Stop it, if it runs, and free what it replaced. */
void engine_watch_stop(struct admin *a);

/* An "engine" object from a report, as another node sent it: only its
 * known fields, checked; a bad one becomes {"backends": [], "error": ...}
 * rather than refusing the heartbeat.  NULL only when out of memory. */
cJSON *engine_report_clean(const cJSON *e);

#endif
