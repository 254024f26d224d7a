/*
 * The Prometheus text reader the metrics sampler uses on an engine's
 * /metrics: sums over label sets (quoted values holding braces and
 * spaces), histogram buckets, and quantiles between two scrapes checked
 * against values worked out by hand the way PromQL's histogram_quantile
 * interpolates.
 */
#include <math.h>

#include "testlib.h"
#include "metrics/prom.h"

static const char before[] = "# HELP vllm:request_success_total Finished requests.\n"
			     "# TYPE vllm:request_success_total counter\n"
			     "vllm:request_success_total{model_name=\"a b}\",finished_reason=\"stop\"} 3\n"
			     "vllm:request_success_total{model_name=\"a b}\",finished_reason=\"length\"} 4\n"
			     "vllm:request_success_total_other 100\n"
			     "vllm:ttft_bucket{model_name=\"m\",le=\"0.1\"} 2\n"
			     "vllm:ttft_bucket{model_name=\"m\",le=\"0.5\"} 4\n"
			     "vllm:ttft_bucket{model_name=\"m\",le=\"1\"} 4\n"
			     "vllm:ttft_bucket{model_name=\"m\",le=\"+Inf\"} 4\n"
			     "vllm:ttft_sum{model_name=\"m\"} 1.0\n";
static const char after[] = "vllm:request_success_total{model_name=\"x\",finished_reason=\"stop\"} 10\n"
			    "vllm:ttft_bucket{model_name=\"m\",le=\"0.1\"} 2\n"
			    "vllm:ttft_bucket{model_name=\"m\",le=\"0.5\"} 8\n"
			    "vllm:ttft_bucket{model_name=\"m\",le=\"1\"} 12\n"
			    "vllm:ttft_bucket{model_name=\"m\",le=\"+Inf\"} 14\n";

int
main(void)
{
	struct prom_hist a, b, none = { 0 };
	double v;

	CHECK(prom_value(before, "vllm:request_success_total", &v) == 0 && v == 7,
	      "summed over label sets, braces in a quoted value and a longer name left alone: %g", v);
	CHECK(prom_value(before, "vllm:missing", &v) == -1, "a metric that is not there");
	prom_histogram(before, "vllm:ttft", &a);
	prom_histogram(after, "vllm:ttft", &b);
	CHECK(a.n == 4 && b.n == 4 && isinf(b.le[3]) && b.le[1] == 0.5 && b.count[2] == 12, "buckets read");
	/* between the scrapes: 0 in (0, 0.1], 4 in (0.1, 0.5], 4 in (0.5, 1],
	 * 2 past 1: 10 in all */
	v = prom_quantile(&b, &a, 0.5);
	CHECK(fabs(v - 0.625) < 1e-12, "median: rank 5 is the first of (0.5, 1]'s four: 0.5 + 0.5 / 4 = %g", v);
	v = prom_quantile(&b, &a, 0.2);
	CHECK(fabs(v - 0.3) < 1e-12, "rank 2: halfway through (0.1, 0.5]: %g", v);
	v = prom_quantile(&b, &a, 0.95);
	CHECK(v == 1.0, "rank 9.5 is past the last bound: the bound, %g", v);
	v = prom_quantile(&b, &none, 0.5);
	CHECK(fabs(v - (0.1 + 0.4 * (7 - 2) / 6.0)) < 1e-12, "from the start (no scrape before): %g", v);
	CHECK(isnan(prom_quantile(&a, &a, 0.5)), "nothing observed between the scrapes: NAN");
	a.n = 3;
	CHECK(isnan(prom_quantile(&b, &a, 0.5)), "buckets that differ: NAN");
	return test_summary();
}
