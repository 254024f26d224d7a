/*
 * privai-engine bench: prompt processing (pp: one batched prefill of -p
 * tokens) and text generation (tg: -n tokens one at a time) in tokens per
 * second, mean and standard deviation over -r repetitions after a warm-up.
 * It also measures the machine's memory read bandwidth with the same
 * threads, and reports the generation bound that implies: bandwidth /
 * bytes of weights read per generated token.
 */
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct bw_arg {
	const uint64_t *buf;
	size_t n;
	uint64_t sum;
};

static void *
bw_read(void *p)
{
	struct bw_arg *a = p;
	uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;

	for (size_t i = 0; i + 4 <= a->n; i += 4) {
		s0 += a->buf[i];
		s1 += a->buf[i + 1];
		s2 += a->buf[i + 2];
		s3 += a->buf[i + 3];
	}
	a->sum = s0 + s1 + s2 + s3;
	return NULL;
}

/* Read bandwidth in GB/s over a buffer far larger than the caches. */
static double
read_bandwidth(int threads)
{
	size_t bytes = (size_t)1 << 30, n = bytes / 8;
	uint64_t *buf = malloc(bytes);
	double best = 0;

	if (buf == NULL)
		return 0;
	for (size_t i = 0; i < n; i++)
		buf[i] = i;
	for (int rep = 0; rep < 3; rep++) {
		pthread_t th[256];
		struct bw_arg arg[256];
		int nt = threads > 256 ? 256 : threads;
		double t0 = now();
		for (int i = 0; i < nt; i++) {
			arg[i] = (struct bw_arg){ buf + n / nt * i, n / nt, 0 };
			pthread_create(&th[i], NULL, bw_read, &arg[i]);
		}
		for (int i = 0; i < nt; i++)
			pthread_join(th[i], NULL);
		double gbs = bytes / (now() - t0) / 1e9;
		best = gbs > best ? gbs : best;
	}
	free(buf);
	return best;
}

static void
stats(const double *v, int n, double *mean, double *sd)
{
	double s = 0, q = 0;

	for (int i = 0; i < n; i++)
		s += v[i];
	*mean = s / n;
	for (int i = 0; i < n; i++)
		q += (v[i] - *mean) * (v[i] - *mean);
	*sd = n > 1 ? sqrt(q / (n - 1)) : 0;
}

int
cmd_bench(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "model", required_argument, NULL, 'm' }, { "threads", required_argument, NULL, 't' },
		{ "reps", required_argument, NULL, 'r' }, { "json", no_argument, NULL, 'j' },
		{ "no-bandwidth", no_argument, NULL, 'B' }, { "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *path = NULL;
	struct engine_ctx_params cp = { 0 };
	int c, n_pp = 128, n_tg = 32, reps = 3, json = 0, measure_bw = 1, rc = 1;
	char err[PRIVAI_ERR_LEN];
	struct cli_engine e;

	optind = 1;
	while ((c = getopt_long(argc, argv, "m:p:n:t:r:h", opts, NULL)) != -1) {
		int bad = 0;
		switch (c) {
		case 'm': path = optarg; break;
		case 'p': bad = cli_parse_int("bench", "-p", optarg, 1, 65536, &n_pp); break;
		case 'n': bad = cli_parse_int("bench", "-n", optarg, 1, 65536, &n_tg); break;
		case 't': bad = cli_parse_int("bench", "-t", optarg, 1, 1024, &cp.n_threads); break;
		case 'r': bad = cli_parse_int("bench", "-r", optarg, 1, 1000, &reps); break;
		case 'j': json = 1; break;
		case 'B': measure_bw = 0; break;
		case 'h':
			puts("usage: privai-engine bench -m MODEL [-p 128] [-n 32] [-t THREADS] [-r 3] [--json] [--no-bandwidth]");
			return 0;
		default: return 2;
		}
		if (bad)
			return 1;
	}
	if (path == NULL)
		return cli_error("bench", "needs -m MODEL");
	cp.n_ctx = n_pp > n_tg ? n_pp + 16 : n_tg + 16;
	cp.n_batch = n_pp;
	if (cli_engine_open("bench", path, &cp, &e))
		return 1;
	int V = e.model->hp.n_vocab, nth = e.ctx->n_threads;
	int32_t *toks = malloc((size_t)n_pp * sizeof(int32_t));
	float *logits = malloc((size_t)V * sizeof(float));
	double *pp = calloc((size_t)reps, sizeof(double)), *tg = calloc((size_t)reps, sizeof(double));
	if (toks == NULL || logits == NULL || pp == NULL || tg == NULL) {
		cli_error("bench", "out of memory");
		goto out;
	}
	for (int i = 0; i < n_pp; i++)
		toks[i] = (int32_t)((i * 7919u + 17) % (unsigned)V);
	for (int rep = -1; rep < reps; rep++) { /* rep -1 warms up */
		engine_ctx_reset(e.ctx);
		double t0 = now();
		if (engine_decode(e.ctx, toks, n_pp, 0, logits, err) < 0) {
			cli_error("bench", "%s", err);
			goto out;
		}
		double t1 = now();
		engine_ctx_reset(e.ctx);
		for (int i = 0; i < n_tg; i++)
			if (engine_decode(e.ctx, &toks[i % n_pp], 1, 0, logits, err) < 0) {
				cli_error("bench", "%s", err);
				goto out;
			}
		double t2 = now();
		if (rep >= 0) {
			pp[rep] = n_pp / (t1 - t0);
			tg[rep] = n_tg / (t2 - t1);
		}
	}
	double pp_m, pp_sd, tg_m, tg_sd;
	stats(pp, reps, &pp_m, &pp_sd);
	stats(tg, reps, &tg_m, &tg_sd);
	/* generation reads every weight once per token, except the embedding table */
	double bytes_tok = (double)e.model->weight_bytes;
	if (e.model->output.data != e.model->tok_embd.data)
		bytes_tok -= (double)e.model->tok_embd.row_bytes * e.model->tok_embd.rows;
	double bw = measure_bw ? read_bandwidth(nth) : 0, bound = bw > 0 ? bw * 1e9 / bytes_tok : 0;
	if (json) {
		printf("{\"model\":\"%s\",\"threads\":%d,\"simd\":\"%s\",\"n_prompt\":%d,\"n_gen\":%d,\"reps\":%d,"
		       "\"pp_tokens_per_s\":%.2f,\"pp_stddev\":%.2f,\"tg_tokens_per_s\":%.2f,\"tg_stddev\":%.2f,"
		       "\"weight_bytes_per_token\":%.0f,\"read_bandwidth_gb_s\":%.2f,"
		       "\"tg_bound_tokens_per_s\":%.2f,\"tg_fraction_of_bound\":%.3f}\n",
		       path, nth, compute_cpu_simd_name(), n_pp, n_tg, reps, pp_m, pp_sd, tg_m, tg_sd,
		       bytes_tok, bw, bound, bound > 0 ? tg_m / bound : 0);
	} else {
		printf("| model | threads | simd | test | tokens/s |\n|---|---|---|---|---|\n");
		printf("| %s | %d | %s | pp%d | %.2f ± %.2f |\n", path, nth, compute_cpu_simd_name(), n_pp, pp_m, pp_sd);
		printf("| %s | %d | %s | tg%d | %.2f ± %.2f |\n", path, nth, compute_cpu_simd_name(), n_tg, tg_m, tg_sd);
		if (bw > 0)
			printf("\nread bandwidth %.1f GB/s; %.1f MB of weights per token; tg bound %.2f tokens/s; "
			       "tg reaches %.0f%% of it\n", bw, bytes_tok / 1e6, bound, 100 * tg_m / bound);
	}
	rc = 0;
out:
	free(toks);
	free(logits);
	free(pp);
	free(tg);
	cli_engine_close(&e);
	return rc;
}
