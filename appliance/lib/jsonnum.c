/* Whole numbers out of JSON, range first (jsonnum.h). */
#include "jsonnum.h"
#include "status.h"

/* 2^63: the first double beyond int64_t */
#define TWO_63 9223372036854775808.0

int
json_is_whole(double d)
{
	if (d >= -TWO_63 && d < TWO_63)
		return d == (double)(int64_t)d;
	return d == d && d - d == 0; /* finite: a double this large has no fraction */
}

int
json_int_in(const cJSON *v, int64_t lo, int64_t hi, int64_t *out)
{
	if (!cJSON_IsNumber(v))
		return APP_EINVAL;
	double d = v->valuedouble;
	/* the comparison is false for NaN, and keeps the cast below defined */
	if (!(d >= (double)lo && d <= (double)hi && d >= -TWO_63 && d < TWO_63) || !json_is_whole(d))
		return APP_EINVAL;
	int64_t x = (int64_t)d;
	if (x < lo || x > hi) /* (double)hi may round up past hi */
		return APP_EINVAL;
	*out = x;
	return APP_OK;
}
