/* The Prometheus text format, read (metrics/prom.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "metrics/prom.h"

/* Whether line starts with metric `name` followed by labels or a space. */
static const char *
after_name(const char *line, const char *name)
{
	size_t n = strlen(name);

	if (strncmp(line, name, n) != 0 || (line[n] != '{' && line[n] != ' '))
		return NULL;
	return line + n;
}

/* The sample's value: what follows the labels (which may hold spaces in
 * quoted values). */
static int
sample_value(const char *p, double *v)
{
	char *end;

	if (*p == '{') {
		int quoted = 0;
		for (p++; *p != '\0' && *p != '\n' && (quoted || *p != '}'); p++) {
			if (quoted && *p == '\\' && p[1] != '\0')
				p++;
			else if (*p == '"')
				quoted = !quoted;
		}
		if (*p != '}')
			return -1;
		p++;
	}
	*v = strtod(p, &end);
	return end == p ? -1 : 0;
}

int
prom_value(const char *text, const char *name, double *out)
{
	int found = 0;

	*out = 0;
	for (const char *line = text; line != NULL && *line != '\0';) {
		const char *p = after_name(line, name);
		double v;
		if (p != NULL && sample_value(p, &v) == 0 && isfinite(v)) {
			*out += v;
			found = 1;
		}
		line = strchr(line, '\n');
		line = line != NULL ? line + 1 : NULL;
	}
	return found ? 0 : -1;
}

void
prom_histogram(const char *text, const char *name, struct prom_hist *h)
{
	char bucket[160];
	size_t n = strlen(name);

	h->n = 0;
	if (n + sizeof("_bucket") > sizeof(bucket))
		return;
	memcpy(bucket, name, n);
	memcpy(bucket + n, "_bucket", sizeof("_bucket"));
	for (const char *line = text; line != NULL && *line != '\0' && h->n < PROM_MAX_BUCKETS;) {
		const char *p = after_name(line, bucket), *le, *eol = strchr(line, '\n');
		double v;
		if (p != NULL && (le = strstr(p, "le=\"")) != NULL && (eol == NULL || le < eol) &&
		    sample_value(p, &v) == 0) {
			le += 4;
			h->le[h->n] = strncmp(le, "+Inf\"", 5) == 0 ? INFINITY : strtod(le, NULL);
			h->count[h->n] = v;
			h->n++;
		}
		line = eol != NULL ? eol + 1 : NULL;
	}
}

double
prom_quantile(const struct prom_hist *now, const struct prom_hist *before, double q)
{
	int n = now->n;

	if (n == 0 || (before->n != 0 && before->n != n))
		return NAN;
	double total = now->count[n - 1] - (before->n ? before->count[n - 1] : 0);
	if (total <= 0)
		return NAN;
	double rank = q * total, prev_count = 0, prev_le = 0;
	for (int i = 0; i < n; i++) {
		double c = now->count[i] - (before->n ? before->count[i] : 0);
		if (c >= rank) {
			if (isinf(now->le[i])) /* past the last bound: its value, as PromQL answers */
				return prev_le;
			double in_bucket = c - prev_count;
			return in_bucket > 0 ? prev_le + (now->le[i] - prev_le) * (rank - prev_count) / in_bucket
					     : now->le[i];
		}
		prev_count = c;
		prev_le = now->le[i];
	}
	return prev_le;
}
