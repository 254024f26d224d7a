/*
 * Appliance settings: a fixed set of named keys, each with a default and a
 * check, stored in the settings table.  Unknown keys are refused, so a typo
 * cannot leave a setting silently unused.
 */
#ifndef PRIVAI_ADMIN_SETTINGS_H
#define PRIVAI_ADMIN_SETTINGS_H

#include <cjson/cJSON.h>
#include <sqlite3.h>
#include <stddef.h>

/* The value of key (stored or default) into out; APP_ENOTFOUND for an unknown key. */
int settings_get(sqlite3 *db, const char *key, char *out, size_t size);
/* Check and store; APP_ENOTFOUND for an unknown key, APP_EINVAL
 * naming what the value must be. */
int settings_set(sqlite3 *db, const char *key, const char *value, char *err);
/* Every key with its value: {"cluster_name": "...", ...}. */
cJSON *settings_json(sqlite3 *db);

#endif
