/*
 * Whole numbers out of JSON (cJSON keeps every number as a double).
 * The range is checked on the double before any conversion: casting a
 * double beyond int64_t (1e300, inf) is undefined behaviour, which the
 * admin_json fuzzer found in four readers that cast first.
 */
#ifndef PRIVAI_JSONNUM_H
#define PRIVAI_JSONNUM_H

#include <stdint.h>

#include <cjson/cJSON.h>

/* 1 when d is finite and has no fractional part (any magnitude). */
int json_is_whole(double d);

/* v as a whole number in lo..hi: APP_OK with *out set, or APP_EINVAL
 * (not a number, not whole, out of range) with *out untouched. */
int json_int_in(const cJSON *v, int64_t lo, int64_t hi, int64_t *out);

#endif
