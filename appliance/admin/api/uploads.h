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

#endif
