/*
 * privai-engine bench: prompt processing (pp: one batched prefill of -p
 * tokens) and text generation (tg: -n tokens one at a time) in tokens per
 * second, mean and standard deviation over -r repetitions after a warm-up.
 * With -d N both run after N tokens already in the cache (llama-bench's
 * depth), where attention and the KV cache's bandwidth count.  With -b B
 * generation runs B sequences side by side, one token of each a forward
 * pass, as a server does at concurrency B (llama-batched-bench's -npl);
 * its rate counts the tokens of all B.
 * It also measures read bandwidth (bench_bandwidth.h) just before and
 * just after every repetition's generation, and reports the bound that
 * implies, bandwidth / bytes of weights read per token, and the share
 * of it each repetition's generation reached, their mean and spread.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_bandwidth.h"
#include "cli.h"

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

/* B sequences side by side: sequence s owns blocks s * per_seq... of
 * the pool, and each step feeds one token of every sequence. */
struct par_seqs {
	int n_seq, per_seq;
	int32_t **table, *tok, *pos, *rows;
};

static void
par_free(struct par_seqs *ps)
{
	if (ps->table != NULL)
		for (int s = 0; s < ps->n_seq; s++)
			free(ps->table[s]);
	free(ps->table);
	free(ps->tok);
	free(ps->pos);
	free(ps->rows);
}

static int
par_init(struct par_seqs *ps, int n_seq, int n_ctx)
{
	*ps = (struct par_seqs){ .n_seq = n_seq, .per_seq = (n_ctx + ENGINE_KV_BLOCK - 1) / ENGINE_KV_BLOCK };
	ps->table = calloc((size_t)n_seq, sizeof(*ps->table));
	ps->tok = calloc((size_t)n_seq, sizeof(int32_t));
	ps->pos = calloc((size_t)n_seq, sizeof(int32_t));
	ps->rows = calloc((size_t)n_seq, sizeof(int32_t));
	if (ps->table == NULL || ps->tok == NULL || ps->pos == NULL || ps->rows == NULL)
		return -1;
	for (int s = 0; s < n_seq; s++) {
		if ((ps->table[s] = malloc((size_t)ps->per_seq * sizeof(int32_t))) == NULL)
			return -1;
		for (int k = 0; k < ps->per_seq; k++)
			ps->table[s][k] = s * ps->per_seq + k;
		ps->rows[s] = s;
	}
	return 0;
}

/* Fill sequence s with `depth` tokens, n at a time. */
static int
par_fill(struct engine_ctx *ctx, const struct par_seqs *ps, int s, const int32_t *toks, int n, int depth, float *logits,
	 char *err)
{
	int32_t *pos = malloc((size_t)n * sizeof(int32_t));
	const int32_t **tabs = malloc((size_t)n * sizeof(*tabs));
	int r = 0;

	if (pos == NULL || tabs == NULL)
		r = privai_fail(err, PRIVAI_ENOMEM, "out of memory");
	for (int done = 0; r == 0 && done < depth; done += n) {
		int m = depth - done < n ? depth - done : n;
		int32_t last = m - 1;
		for (int i = 0; i < m; i++) {
			pos[i] = done + i;
			tabs[i] = ps->table[s];
		}
		struct compute_batch b = { m, toks, pos, tabs, 1, &last, 0 };
		r = engine_forward(ctx, &b, logits, err);
	}
	free(pos);
	free(tabs);
	return r;
}

/* Fill every sequence to `depth`, then time n_tg steps of one token per
 * sequence; returns the seconds, or -1. */
static double
par_generate(struct engine_ctx *ctx, struct par_seqs *ps, const int32_t *toks, int n, int depth, int n_tg,
	     float *logits, char *err)
{
	for (int s = 0; s < ps->n_seq; s++)
		if (par_fill(ctx, ps, s, toks, n, depth, logits, err) < 0)
			return -1;
	double t0 = bench_now();
	for (int i = 0; i < n_tg; i++) {
		for (int s = 0; s < ps->n_seq; s++) {
			ps->tok[s] = toks[(i + s) % n];
			ps->pos[s] = depth + i;
		}
		struct compute_batch b = { .n = ps->n_seq,
					   .tokens = ps->tok,
					   .pos = ps->pos,
					   .table = (const int32_t *const *)ps->table,
					   .n_out = ps->n_seq,
					   .out_rows = ps->rows };
		if (engine_forward(ctx, &b, logits, err) < 0)
			return -1;
	}
	return bench_now() - t0;
}

/* An empty cache, then `depth` tokens in batches of up to n: what a
 * test at that depth starts from. */
static int
fill_depth(struct engine_ctx *ctx, const int32_t *toks, int n, int depth, float *logits, char *err)
{
	engine_ctx_reset(ctx);
	for (int done = 0; done < depth; done += n) {
		int r = engine_decode(ctx, toks, depth - done < n ? depth - done : n, 0, logits, err);
		if (r < 0)
			return r;
	}
	return 0;
}

int
cmd_bench(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "threads", required_argument, NULL, 't' },
		{ "device", required_argument, NULL, 'D' },
		{ "reps", required_argument, NULL, 'r' },
		{ "parallel", required_argument, NULL, 'b' },
		{ "json", no_argument, NULL, 'j' },
		{ "no-bandwidth", no_argument, NULL, 'B' },
		{ "fixed-threads", no_argument, NULL, 'F' },
		{ "help", no_argument, NULL, 'h' },
		CLI_TP_OPTIONS,
		{ NULL, 0, NULL, 0 },
	};
	const char *path = NULL;
	struct engine_ctx_params cp = { 0 };
	int c, t, n_pp = 128, n_tg = 32, depth = 0, reps = 3, n_seq = 1, json = 0, measure_bw = 1, rc = 1;
	struct par_seqs ps = { 0 };
	struct cli_tp tp = { .size = 1 };
	struct coll_stats tg0 = { 0 }, tg1 = { 0 };
	struct bw_probe probe = { 0 };
	char err[PRIVAI_ERR_LEN];
	struct cli_engine e;

	optind = 1;
	while ((c = getopt_long(argc, argv, "m:p:n:d:t:r:b:h", opts, NULL)) != -1) {
		int bad = 0;
		if ((t = cli_tp_option("bench", c, optarg, &tp)) >= 0) {
			if (t)
				return 1;
			continue;
		}
		switch (c) {
		case 'm':
			path = optarg;
			break;
		case 'p':
			bad = cli_parse_int("bench", "-p", optarg, 1, 65536, &n_pp);
			break;
		case 'n':
			bad = cli_parse_int("bench", "-n", optarg, 1, 65536, &n_tg);
			break;
		case 'd':
			bad = cli_parse_int("bench", "-d", optarg, 0, 1 << 20, &depth);
			break;
		case 't':
			bad = cli_parse_int("bench", "-t", optarg, 1, 1024, &cp.n_threads);
			break;
		case 'r':
			bad = cli_parse_int("bench", "-r", optarg, 1, 1000, &reps);
			break;
		case 'b':
			bad = cli_parse_int("bench", "-b", optarg, 1, 256, &n_seq);
			break;
		case 'D':
			cp.device = optarg;
			break;
		case 'j':
			json = 1;
			break;
		case 'B':
			measure_bw = 0;
			break;
		case 'F':
			cp.fixed_threads = 1;
			break;
		case 'h':
			puts("usage: privai-engine bench -m MODEL [-p 128] [-n 32] [-d DEPTH] [-b SEQUENCES] [-t "
			     "THREADS] [--device "
			     "cpu|cuda] "
			     "[-r 3] "
			     "[--json] [--no-bandwidth] [--fixed-threads] [--tp N [--tp-deadline S]] (--tp N: under "
			     "mpirun -np N; "
			     "rank 0 prints)");
			return 0;
		default:
			return 2;
		}
		if (bad)
			return 1;
	}
	if (path == NULL)
		return cli_error("bench", "needs -m MODEL");
	cp.n_ctx = depth + (n_pp > n_tg ? n_pp : n_tg) + 16;
	/* the cache is filled up to 512 tokens a batch whatever -p is, as
	 * llama-bench fills it: -p 1 -d 2048 filled it a token at a time,
	 * minutes for a float 1B model */
	int n_fill = depth < 512 ? depth : 512;
	n_fill = n_fill > n_pp ? n_fill : n_pp;
	cp.n_batch = n_fill > n_seq ? n_fill : n_seq;
	if (n_seq > 1) {
		if (tp.size > 1)
			return cli_error("bench", "-b runs on one rank only, not with --tp");
		cp.n_kv_blocks = n_seq * ((cp.n_ctx + ENGINE_KV_BLOCK - 1) / ENGINE_KV_BLOCK);
	}
	tp.gpu = cp.device != NULL && strcmp(cp.device, "cuda") == 0;
	if (cli_tp_join("bench", &tp))
		return 1;
	cp.group = tp.group;
	if (cli_engine_open("bench", path, &cp, &e))
		return cli_tp_fail("bench", &tp, "%s: cannot be benchmarked", path);
	if (cli_tp_follower(&tp)) {
		rc = cli_tp_follow("bench", &tp, e.ctx);
		cli_engine_close(&e);
		cli_tp_leave(&tp);
		return rc;
	}
	/* the transfer time of one node's memory says nothing of a group's */
	if (tp.group != NULL)
		measure_bw = 0;
	struct engine_ctx_info ci;
	engine_ctx_info(e.ctx, &ci);
	int V = e.model->hp.n_vocab, nth = ci.n_threads;
	int32_t *toks = malloc((size_t)n_fill * sizeof(int32_t));
	float *logits = malloc((size_t)V * n_seq * sizeof(float));
	double *pp = calloc((size_t)reps, sizeof(double)), *tg = calloc((size_t)reps, sizeof(double));
	double *bw = calloc((size_t)reps, sizeof(double)), *frac = calloc((size_t)reps, sizeof(double));
	double *probes = calloc((size_t)reps * 2, sizeof(double)); /* GB/s before and after each */
	if (toks == NULL || logits == NULL || pp == NULL || tg == NULL || bw == NULL || frac == NULL ||
	    probes == NULL || (n_seq > 1 && par_init(&ps, n_seq, cp.n_ctx) < 0)) {
		cli_error("bench", "out of memory");
		goto out;
	}
	for (int i = 0; i < n_fill; i++)
		toks[i] = (int32_t)((i * 7919u + 17) % (unsigned)V);
	/* generation reads every weight once per token, except the embedding table */
	double bytes_tok = (double)e.model->weight_bytes;
	if (e.model->output.data != e.model->tok_embd.data)
		bytes_tok -= (double)e.model->tok_embd.row_bytes * e.model->tok_embd.rows;
	if (measure_bw && bw_probe_open(&probe, e.model->file->map_size - e.model->file->data_offset, nth) < 0)
		measure_bw = 0;                 /* no memory for it: the rates alone */
	for (int rep = -1; rep < reps; rep++) { /* rep -1 warms up */
		if (fill_depth(e.ctx, toks, n_fill, depth, logits, err) < 0)
			goto fail;
		double t0 = bench_now();
		if (engine_decode(e.ctx, toks, n_pp, 0, logits, err) < 0)
			goto fail;
		double t1 = bench_now();
		if (n_seq > 1) {
			double dt = par_generate(e.ctx, &ps, toks, n_fill, depth, n_tg, logits, err);
			if (dt < 0)
				goto fail;
			if (rep >= 0) {
				pp[rep] = n_pp / (t1 - t0);
				tg[rep] = (double)n_seq * n_tg / dt;
			}
			continue;
		}
		if (fill_depth(e.ctx, toks, n_fill, depth, logits, err) < 0)
			goto fail;
		double bw0 = measure_bw ? bw_probe_run(&probe) : 0;
		double t2 = bench_now();
		if (tp.group != NULL)
			tg0 = tp.group->stats;
		for (int i = 0; i < n_tg; i++)
			if (engine_decode(e.ctx, &toks[i % n_pp], 1, 0, logits, err) < 0)
				goto fail;
		double t3 = bench_now();
		if (tp.group != NULL)
			tg1 = tp.group->stats;
		double bw1 = measure_bw ? bw_probe_run(&probe) : 0;
		if (rep >= 0) {
			pp[rep] = n_pp / (t1 - t0);
			tg[rep] = n_tg / (t3 - t2);
			probes[2 * rep] = bw0;
			probes[2 * rep + 1] = bw1;
			bw[rep] = (bw0 + bw1) / 2;
			frac[rep] = bw[rep] > 0 ? tg[rep] * bytes_tok / (bw[rep] * 1e9) : 0;
		}
	}
	if (measure_bw && n_seq > 1) /* no share of a bound for these: the bus once */
		for (int rep = 0; rep < reps; rep++)
			probes[2 * rep] = probes[2 * rep + 1] = bw[rep] = rep == 0 ? bw_probe_run(&probe) : bw[0];
	double pp_m, pp_sd, tg_m, tg_sd, bw_m, bw_sd, fr_m, fr_sd;
	stats(pp, reps, &pp_m, &pp_sd);
	stats(tg, reps, &tg_m, &tg_sd);
	stats(bw, reps, &bw_m, &bw_sd);
	stats(frac, reps, &fr_m, &fr_sd);
	double bound = bw_m > 0 ? bw_m * 1e9 / bytes_tok : 0;
	if (n_seq > 1)
		fr_m = fr_sd = 0;
	/* what the group's all-reduces cost a generated token (the last rep) */
	double ar_n = (double)(tg1.n_allreduce - tg0.n_allreduce) / n_tg;
	double ar_bytes = (double)(tg1.allreduce_bytes - tg0.allreduce_bytes) / n_tg;
	double ar_ms = (tg1.allreduce_s - tg0.allreduce_s) * 1e3 / n_tg;
	if (json) {
		printf("{\"model\":\"%s\",\"threads\":%d,\"simd\":\"%s\",\"n_prompt\":%d,\"n_gen\":%d,\"depth\":%d,"
		       "\"parallel\":%d,"
		       "\"reps\":%d,"
		       "\"pp_tokens_per_s\":%.2f,\"pp_stddev\":%.2f,\"tg_tokens_per_s\":%.2f,\"tg_stddev\":%.2f,"
		       "\"weight_bytes_per_token\":%.0f,\"read_bandwidth_gb_s\":%.2f,\"read_bandwidth_stddev\":%.2f,"
		       "\"tg_bound_tokens_per_s\":%.2f,\"tg_fraction_of_bound\":%.3f,"
		       "\"tg_fraction_of_bound_stddev\":%.3f",
		       path, nth, compute_cpu_simd_name(), n_pp, n_tg, depth, n_seq, reps, pp_m, pp_sd, tg_m, tg_sd,
		       bytes_tok, bw_m, bw_sd, bound, fr_m, fr_sd);
		/* every repetition's figures, for a reader to check the means by */
		printf(",\"tg_reps\":[");
		for (int rep = 0; rep < reps; rep++)
			printf("%s%.2f", rep ? "," : "", tg[rep]);
		printf("],\"read_bandwidth_reps\":[");
		for (int rep = 0; rep < reps; rep++)
			printf("%s[%.2f,%.2f]", rep ? "," : "", probes[2 * rep], probes[2 * rep + 1]);
		printf("]");
		if (tp.group != NULL)
			printf(",\"tp\":%d,\"tp_transport\":\"%s\",\"tp_allreduce_per_token\":%g,"
			       "\"tp_allreduce_bytes_per_token\":%.0f,\"tp_allreduce_ms_per_token\":%.4f,"
			       "\"tp_weight_bytes_rank0\":%zu",
			       tp.size, tp.group->ops->name, ar_n, ar_bytes, ar_ms, ci.weight_bytes);
		printf("}\n");
	} else {
		printf("| model | threads | simd | test | tokens/s |\n|---|---|---|---|---|\n");
		char at[32] = "";
		if (depth > 0)
			snprintf(at, sizeof(at), " @ d%d", depth);
		char par[24] = "";
		if (n_seq > 1)
			snprintf(par, sizeof(par), " x %d", n_seq);
		printf("| %s | %d | %s | pp%d%s | %.2f ± %.2f |\n", path, nth, compute_cpu_simd_name(), n_pp, at, pp_m,
		       pp_sd);
		printf("| %s | %d | %s | tg%d%s%s | %.2f ± %.2f |\n", path, nth, compute_cpu_simd_name(), n_tg, par, at,
		       tg_m, tg_sd);
		if (bw_m > 0 && n_seq == 1)
			printf("\nread bandwidth %.1f ± %.1f GB/s around the repetitions; %.1f MB of weights per "
			       "token; tg bound %.2f tokens/s; each repetition's tg reached %.0f ± %.0f%% of its "
			       "own\n",
			       bw_m, bw_sd, bytes_tok / 1e6, bound, 100 * fr_m, 100 * fr_sd);
		if (tp.group != NULL)
			printf("\ntensor parallel: %d ranks over %s; a generated token takes %g all-reduces of %.1f "
			       "KiB "
			       "in all, %.3f ms inside them (waits for slower ranks included); rank 0 holds %.1f MiB "
			       "of weights\n",
			       tp.size, tp.group->ops->name, ar_n, ar_bytes / 1024, ar_ms,
			       (double)ci.weight_bytes / (1 << 20));
	}
	rc = 0;
	goto out;
fail:
	cli_error("bench", "%s", err);
out:
	free(toks);
	free(logits);
	free(pp);
	free(tg);
	free(bw);
	free(probes);
	free(frac);
	bw_probe_close(&probe);
	par_free(&ps);
	cli_engine_close(&e);
	cli_tp_leave(&tp);
	return rc;
}
