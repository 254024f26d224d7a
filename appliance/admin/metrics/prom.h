/*
 * Just enough of the Prometheus text format to read an engine's /metrics:
 * a metric's value summed over its label sets, and a histogram's buckets,
 * with quantiles estimated from two scrapes the way PromQL's
 * histogram_quantile does (linear within the bucket).
 */
#ifndef PRIVAI_ADMIN_PROM_H
#define PRIVAI_ADMIN_PROM_H

#define PROM_MAX_BUCKETS 48

struct prom_hist {
	int n;                          /* buckets read, +Inf last; 0: none */
	double le[PROM_MAX_BUCKETS];    /* upper bounds, ascending */
	double count[PROM_MAX_BUCKETS]; /* cumulative counts */
};

/* The sum of every sample of metric `name` (any labels) into *out: 0, or
 * -1 when text has none. */
int prom_value(const char *text, const char *name, double *out);

/* The buckets of histogram `name` (its name_bucket lines). */
void prom_histogram(const char *text, const char *name, struct prom_hist *h);

/* The q-quantile (0..1) of what was observed between `before` and `now`
 * (the same histogram scraped twice); NAN when nothing was, or the
 * buckets differ. */
double prom_quantile(const struct prom_hist *now, const struct prom_hist *before, double q);

#endif
