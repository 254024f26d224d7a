/*
 * Sizing over HTTP: for a registered model (its GGUF shape) or for a
 * model described in a form, on a GPU type: weights, KV per token, KV for
 * context x concurrency, headroom, and the GPU and node count; and on
 * this cluster's CPU nodes, the ranks and the placement (gpu/sizing.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "admin.h"
#include "http/httpd.h"
#include "store/rows.h"
#include "gpu/sizing.h"
#include "models/models.h"

static const struct gpu_type *
gpu_field(struct req *r, const char *gpu)
{
	const struct gpu_type *g = sizing_gpu(gpu), *t;
	char known[256];
	size_t n = 0;

	if (g != NULL)
		return g;
	known[0] = '\0';
	for (int i = 0; (t = sizing_gpu_at(i)) != NULL && n < sizeof(known); i++)
		n += (size_t)snprintf(known + n, sizeof(known) - n, "%s%s", i ? ", " : "", t->name);
	reply_error(r, 422, "invalid_field", "gpu", "unknown GPU type '%.40s' (%s)", gpu, known);
	return NULL;
}

/* The GPU types sizing knows, for the console's list and for scripts. */
static void
h_sizing_gpus(struct req *r)
{
	cJSON *o = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(o, "data");
	const struct gpu_type *t;

	for (int i = 0; (t = sizing_gpu_at(i)) != NULL; i++) {
		cJSON *g = cJSON_CreateObject();
		cJSON_AddStringToObject(g, "name", t->name);
		cJSON_AddNumberToObject(g, "memory_bytes", t->memory_bytes);
		cJSON_AddStringToObject(g, "interconnect", sizing_link_name(t->link));
		cJSON_AddNumberToObject(g, "interconnect_gbytes_per_s", t->link_gbytes);
		cJSON_AddNumberToObject(g, "gpus_per_node", t->per_node);
		cJSON_AddItemToArray(a, g);
	}
	reply_json(r, 200, o);
}

/* sizing query: gpu, context, concurrency, kv_bytes */
static int
sizing_args(struct req *r, struct sizing_request *q)
{
	const char *gpu = query_arg(r, "gpu"), *v;
	const struct gpu_type *g = gpu_field(r, gpu != NULL ? gpu : "H100-80GB");
	static const char *const names[] = { "context", "concurrency", "kv_bytes" };
	int *dst[] = { &q->context, &q->concurrency, &q->kv_bytes };
	static const int hi[] = { 1 << 24, 1 << 16, 2 };
	char *end;

	if (g == NULL)
		return APP_EINVAL;
	q->gpu = *g;
	for (int i = 0; i < 3; i++) {
		if ((v = query_arg(r, names[i])) == NULL)
			continue;
		long x = strtol(v, &end, 10);
		if (*end != '\0' || end == v || x < 1 || x > hi[i]) {
			reply_error(r, 422, "invalid_field", names[i], "%s must be an integer in 1..%d", names[i],
				    hi[i]);
			return APP_EINVAL;
		}
		*dst[i] = (int)x;
	}
	return 0;
}

static cJSON *
sizing_json(const struct sizing_request *q, const struct sizing_result *s)
{
	cJSON *o = cJSON_CreateObject();

	cJSON_AddStringToObject(o, "gpu", q->gpu.name);
	cJSON_AddStringToObject(o, "interconnect", sizing_link_name(q->gpu.link));
	cJSON_AddNumberToObject(o, "context", q->context);
	cJSON_AddNumberToObject(o, "concurrency", q->concurrency);
	cJSON_AddNumberToObject(o, "kv_bytes_per_value", q->kv_bytes);
	cJSON_AddNumberToObject(o, "weights_bytes", q->model.weight_bytes);
	cJSON_AddNumberToObject(o, "kv_bytes_per_token", s->kv_bytes_per_token);
	cJSON_AddNumberToObject(o, "kv_bytes_total", s->kv_bytes_total);
	cJSON_AddNumberToObject(o, "headroom_bytes_per_gpu", q->headroom_bytes);
	cJSON_AddNumberToObject(o, "runtime_bytes_per_gpu", q->runtime_bytes);
	cJSON_AddNumberToObject(o, "total_bytes", s->total_bytes);
	cJSON_AddNumberToObject(o, "gpus", s->gpus);
	cJSON_AddNumberToObject(o, "nodes", s->nodes);
	cJSON_AddNumberToObject(o, "gpus_per_node", s->gpus_per_node_used);
	cJSON_AddNumberToObject(o, "per_gpu_used_bytes", s->per_gpu_used);
	cJSON_AddStringToObject(o, "why", s->why);
	if (s->warning[0] != '\0')
		cJSON_AddStringToObject(o, "warning", s->warning);
	else
		cJSON_AddNullToObject(o, "warning");
	return o;
}

/* The same model on this cluster's CPU nodes (gpu/sizing.h): the
 * fewest ready nodes, this one first and then the largest, whose memory
 * holds a rank each, and the placement that deploys it.  NULL on a
 * database error. */
static cJSON *
cpu_split_json(sqlite3 *db, const struct sizing_request *q, const struct sizing_result *s)
{
	double bytes[SIZING_MAX_RANKS];
	char names[SIZING_MAX_RANKS][64];
	int cores[SIZING_MAX_RANKS], n = 0;
	sqlite3_stmt *st;
	struct cpu_split cs;

	if (sqlite3_prepare_v2(db,
			       "SELECT name, memory_bytes, coalesce(cpu_cores, 0), is_self FROM nodes WHERE state = "
			       "'ready' AND memory_bytes > 0 ORDER BY is_self DESC, memory_bytes DESC, id",
			       -1, &st, NULL) != SQLITE_OK)
		return NULL;
	while (n < SIZING_MAX_RANKS && sqlite3_step(st) == SQLITE_ROW) {
		if (n == 0 && sqlite3_column_int(st, 3) != 1)
			break; /* rank 0 serves from this node: without it, no split */
		snprintf(names[n], sizeof(names[n]), "%s", (const char *)sqlite3_column_text(st, 0));
		bytes[n] = sqlite3_column_double(st, 1);
		cores[n] = sqlite3_column_int(st, 2);
		n++;
	}
	sqlite3_finalize(st);
	sizing_cpu_split(q, s, bytes, n, &cs);
	cJSON *o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "ranks", cs.ranks);
	cJSON_AddNumberToObject(o, "per_rank_bytes", cs.per_rank_bytes);
	cJSON_AddNumberToObject(o, "usable_bytes_per_node", cs.usable_bytes);
	cJSON_AddStringToObject(o, "why", cs.why);
	if (cs.ranks < 1)
		return o;
	int threads = cores[0];
	for (int i = 1; i < cs.ranks; i++)
		threads = cores[i] < threads ? cores[i] : threads;
	cJSON *p = cJSON_AddObjectToObject(o, "placement");
	cJSON_AddStringToObject(p, "kind", "cpu");
	cJSON_AddNumberToObject(p, "threads", threads > 0 ? threads : 1);
	if (cs.ranks > 1) {
		cJSON *ranks = cJSON_AddArrayToObject(p, "ranks");
		for (int i = 0; i < cs.ranks; i++)
			cJSON_AddItemToArray(ranks, cJSON_CreateString(names[i]));
	}
	return o;
}

/* The GPU answer as a placement on this cluster: `gpus` whole GPUs on
 * this node, or gpus / nodes on each of that many ready nodes that have
 * them, this one first (rank 0 serves from it), then those with the most.
 * Adds "placement" (null when none fits) and "placement_why" to o; -1 on
 * a database error. */
static int
gpu_placement_json(sqlite3 *db, const struct sizing_result *s, cJSON *o)
{
	int per_node = s->gpus_per_node_used, n = 0, self_ok = 0;
	char names[16][64], why[256];
	sqlite3_stmt *st;

	if (s->gpus < 1 || s->nodes > 16) {
		cJSON_AddNullToObject(o, "placement");
		cJSON_AddStringToObject(o, "placement_why", s->gpus < 1 ? "it does not fit" : "more than 16 nodes");
		return 0;
	}
	if (sqlite3_prepare_v2(db,
			       "SELECT n.name, n.is_self FROM nodes n WHERE n.state = 'ready' AND (SELECT count(*) "
			       "FROM gpus g WHERE g.node_id = n.id AND g.mig_enabled = 0) >= ?1 ORDER BY n.is_self "
			       "DESC, (SELECT count(*) FROM gpus g WHERE g.node_id = n.id) DESC, n.id",
			       -1, &st, NULL) != SQLITE_OK)
		return -1;
	sqlite3_bind_int(st, 1, per_node);
	while (n < s->nodes && sqlite3_step(st) == SQLITE_ROW) {
		if (n == 0)
			self_ok = sqlite3_column_int(st, 1) == 1;
		snprintf(names[n++], sizeof(names[0]), "%s", (const char *)sqlite3_column_text(st, 0));
	}
	sqlite3_finalize(st);
	if (!self_ok || n < s->nodes) {
		if (!self_ok)
			snprintf(why, sizeof(why), "this node has fewer than %d whole GPUs, and rank 0 runs here",
				 per_node);
		else
			snprintf(why, sizeof(why), "this cluster has only %d ready node%s with %d whole GPUs, not %d",
				 n, n == 1 ? "" : "s", per_node, s->nodes);
		cJSON_AddNullToObject(o, "placement");
		cJSON_AddStringToObject(o, "placement_why", why);
		return 0;
	}
	cJSON *p = cJSON_AddObjectToObject(o, "placement");
	cJSON_AddStringToObject(p, "kind", "gpu");
	cJSON_AddNumberToObject(p, "count", per_node);
	if (s->nodes > 1) {
		cJSON *ranks = cJSON_AddArrayToObject(p, "ranks");
		for (int i = 0; i < n; i++)
			cJSON_AddItemToArray(ranks, cJSON_CreateString(names[i]));
		snprintf(why, sizeof(why), "%d GPUs on each of %d nodes (tensor parallel %d)", per_node, n, s->gpus);
	} else {
		snprintf(why, sizeof(why), "%d GPU%s of this node", per_node, per_node == 1 ? "" : "s");
	}
	cJSON_AddStringToObject(o, "placement_why", why);
	return 0;
}

/* The answer: on GPUs, as a placement on this cluster's GPUs, and on its
 * CPU nodes. */
static void
reply_sized(struct req *r, const struct sizing_request *q, const struct sizing_result *s)
{
	cJSON *o = sizing_json(q, s), *cpu = cpu_split_json(r->a->db, q, s);

	if (cpu == NULL || gpu_placement_json(r->a->db, s, o) < 0) {
		cJSON_Delete(o);
		cJSON_Delete(cpu);
		reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
		return;
	}
	cJSON_AddItemToObject(o, "cpu", cpu);
	reply_json(r, 200, o);
}

static void
h_sizing(struct req *r)
{
	struct sizing_request q;
	struct sizing_result s;
	char name[160] = "";
	int64_t id = arg_id(r, 0, "model");

	if (id < 0)
		return;
	memset(&q, 0, sizeof(q));
	int rc = model_shape_of(r->a->db, id, &q.model, name, sizeof(name));
	if (rc == APP_EIO) {
		reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
		return;
	}
	if (rc == APP_EINVAL) {
		reply_error(r, 422, "lora_adapter", NULL,
			    "model %lld is a LoRA adapter: it runs inside its base model's deployments, so size "
			    "the base model",
			    (long long)id);
		return;
	}
	if (rc != APP_OK) {
		reply_error(r, 404, "not_found", NULL, "no ready model %lld", (long long)id);
		return;
	}
	q.model.name = name;
	if (sizing_args(r, &q) < 0)
		return;
	if (q.context == 0)
		q.context = q.model.max_context > 0 ? q.model.max_context : 4096;
	sizing_defaults(&q);
	if (sizing_compute(&q, &s) < 0) {
		reply_error(r, 422, "invalid_field", NULL, "%s", s.why);
		return;
	}
	reply_sized(r, &q, &s);
}

/* A model described by hand: parameters (with bits per weight) or
 * weight_bytes, and the attention shape. */
static void
h_sizing_form(struct req *r)
{
	static const char *const known[] = { "gpu",       "parameters",    "bits_per_weight", "weight_bytes",
					     "layers",    "heads",         "kv_heads",        "head_dim",
					     "kv_latent", "max_context",   "context",         "concurrency",
					     "kv_bytes",  "gpus_per_node", "window_layers",   "window",
					     NULL };
	struct sizing_request q;
	struct sizing_result s;
	const struct gpu_type *g;
	const char *gpu;
	int64_t params, bits, wbytes, layers, heads, kvh, hd, lat, maxc, ctx, conc, kvb, per_node, wl, win;
	cJSON *j;

	if ((j = body_object(r)) == NULL)
		return;
	if (fields_known(r, j, known) < 0 || (gpu = field_str(r, j, "gpu", 1, 40, NULL)) == NULL ||
	    (g = gpu_field(r, gpu)) == NULL || field_int(r, j, "parameters", 0, 1, INT64_C(1) << 50, 0, &params) < 0 ||
	    field_int(r, j, "bits_per_weight", 0, 1, 32, 16, &bits) < 0 ||
	    field_int(r, j, "weight_bytes", 0, 1, INT64_C(1) << 53, 0, &wbytes) < 0 ||
	    field_int(r, j, "layers", 1, 1, 4096, 0, &layers) < 0 ||
	    field_int(r, j, "heads", 1, 1, 4096, 0, &heads) < 0 ||
	    field_int(r, j, "kv_heads", 0, 1, 4096, heads, &kvh) < 0 ||
	    field_int(r, j, "head_dim", 1, 1, 4096, 0, &hd) < 0 ||
	    field_int(r, j, "kv_latent", 0, 0, 65536, 0, &lat) < 0 ||
	    field_int(r, j, "max_context", 0, 0, 1 << 24, 0, &maxc) < 0 ||
	    field_int(r, j, "context", 0, 1, 1 << 24, maxc > 0 ? maxc : 4096, &ctx) < 0 ||
	    field_int(r, j, "concurrency", 0, 1, 1 << 16, 1, &conc) < 0 ||
	    field_int(r, j, "kv_bytes", 0, 1, 2, 2, &kvb) < 0 ||
	    field_int(r, j, "gpus_per_node", 0, 1, 64, g->per_node, &per_node) < 0 ||
	    field_int(r, j, "window_layers", 0, 0, layers, 0, &wl) < 0 ||
	    field_int(r, j, "window", wl > 0, 1, 1 << 24, 0, &win) < 0)
		goto out;
	if ((params == 0) == (wbytes == 0)) {
		reply_error(r, 422, "invalid_field", "parameters", "give either parameters or weight_bytes");
		goto out;
	}
	memset(&q, 0, sizeof(q));
	q.model.name = "form";
	q.model.weight_bytes = wbytes > 0 ? (double)wbytes : (double)params * (double)bits / 8.0;
	q.model.layers = (int)layers;
	q.model.heads = (int)heads;
	q.model.kv_heads = (int)kvh;
	q.model.head_dim = (int)hd;
	q.model.kv_latent = (int)lat;
	q.model.max_context = (int)maxc;
	q.model.window_layers = (int)wl;
	q.model.window = (int)win;
	q.gpu = *g;
	q.context = (int)ctx;
	q.concurrency = (int)conc;
	q.kv_bytes = (int)kvb;
	q.gpus_per_node = (int)per_node;
	sizing_defaults(&q);
	if (sizing_compute(&q, &s) < 0)
		reply_error(r, 422, "invalid_field", NULL, "%s", s.why);
	else
		reply_sized(r, &q, &s);
out:
	cJSON_Delete(j);
}

const struct route api_sizing_routes[] = {
	{ "GET", "/api/v1/models/{id}/sizing", ROLE_VIEWER, 0, h_sizing, NULL, NULL },
	{ "POST", "/api/v1/sizing", ROLE_VIEWER, ROUTE_READ_ONLY, h_sizing_form, NULL, NULL },
	{ "GET", "/api/v1/sizing/gpus", ROLE_VIEWER, 0, h_sizing_gpus, NULL, NULL },
	{ NULL, NULL, 0, 0, NULL, NULL, NULL },
};
