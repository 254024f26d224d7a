/*
 * Resumable uploads (api/uploads.c): what the daemon's start asks of them.
 */
#ifndef PRIVAI_ADMIN_API_UPLOADS_H
#define PRIVAI_ADMIN_API_UPLOADS_H

#include <stdint.h>

struct admin;

/* Remove resumable uploads idle past their time and their files, and
 * .part- files with no row (at start, from a crash); the caller holds
 * the store's mutex. */
void uploads_sweep(struct admin *a, int64_t now, int at_start);

struct req;
/* Reply status with model id's row as GET /api/v1/models/{id} lists it;
 * for a LoRA adapter (base_id > 0), with what the engines of its base's
 * running deployments said when told to load it (api/models.c).  The
 * caller holds the store's mutex. */
void models_reply_row(struct req *r, unsigned status, int64_t id, int64_t base_id, const char *name, const char *path);

#endif
