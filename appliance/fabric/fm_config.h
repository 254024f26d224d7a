/*
 * Fabric Manager's configuration (fabricmanager.cfg, KEY=VALUE lines):
 * the keys the appliance manages are set from its settings where they
 * stand, missing ones appended; every other line, comment and key stays
 * as the package shipped it.  The first write keeps the original beside
 * it (FILE.privai-orig).
 */
#ifndef PRIVAI_FM_CONFIG_H
#define PRIVAI_FM_CONFIG_H

#include <stddef.h>

#include "settings.h"

/* The merged text (malloc'd) and how many values changed, or NULL with
 * err naming the line when the text is not a Fabric Manager config. */
char *fm_config_merge(const char *old, size_t len, const struct fabric_settings *s, int *changed, char *err,
		      size_t errsize);

/* Merge into root/s->fm_config and write it (unless dry_run, or nothing
 * changed).  0, or an APP_E* code with err; on error the file is as it was. */
int fm_config_apply(const char *root, const struct fabric_settings *s, int dry_run, int *changed, char *err,
		    size_t errsize);

/* A value of the config under root, e.g. "FABRIC_MODE"; 0, or an APP_E* code when
 * the file or the key is missing. */
int fm_config_get(const char *root, const char *path, const char *key, char *out, size_t size);

#endif
