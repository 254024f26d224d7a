/* GPU count for a model: memory fit and head divisibility. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "status.h"
#include "gpu/sizing.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

/* Memory, link and the usual server, from NVIDIA's data sheets: SXM
 * boards on NVSwitch (A100 600 GB/s, H100/H200 900, B200 1,800; B200's
 * 180 GB is DGX B200's 1,440 GB over 8), H100 NVL bridged in pairs
 * (600 GB/s) and PCIe between the pairs, and the PCIe cards (Gen5 x16:
 * 128 GB/s both ways; Gen4 x16: 64). */
static const struct gpu_type gpus[] = {
	{ "H100-80GB", 80.0 * GIB, GPU_LINK_NVLINK, 900, 8 },
	{ "H200-141GB", 141.0 * GIB, GPU_LINK_NVLINK, 900, 8 },
	{ "B200-180GB", 180.0 * GIB, GPU_LINK_NVLINK, 1800, 8 },
	{ "A100-80GB", 80.0 * GIB, GPU_LINK_NVLINK, 600, 8 },
	{ "A100-40GB", 40.0 * GIB, GPU_LINK_NVLINK, 600, 8 },
	{ "H100-NVL-94GB", 94.0 * GIB, GPU_LINK_NVLINK_PAIRS, 600, 8 },
	{ "H100-PCIe-80GB", 80.0 * GIB, GPU_LINK_PCIE, 128, 8 },
	{ "L40S-48GB", 48.0 * GIB, GPU_LINK_PCIE, 64, 8 },
	{ "L4-24GB", 24.0 * GIB, GPU_LINK_PCIE, 64, 8 },
	{ "A10-24GB", 24.0 * GIB, GPU_LINK_PCIE, 64, 4 },
};

const struct gpu_type *
sizing_gpu(const char *name)
{
	for (size_t i = 0; name != NULL && i < sizeof(gpus) / sizeof(gpus[0]); i++)
		if (strcmp(gpus[i].name, name) == 0)
			return &gpus[i];
	return NULL;
}

const struct gpu_type *
sizing_gpu_at(int i)
{
	return i >= 0 && (size_t)i < sizeof(gpus) / sizeof(gpus[0]) ? &gpus[i] : NULL;
}

const char *
sizing_link_name(enum gpu_link link)
{
	return link == GPU_LINK_NVLINK ? "nvlink" : link == GPU_LINK_NVLINK_PAIRS ? "nvlink-pairs" : "pcie";
}

void
sizing_defaults(struct sizing_request *r)
{
	if (r->context <= 0)
		r->context = r->model.max_context;
	if (r->concurrency <= 0)
		r->concurrency = 1;
	if (r->kv_bytes <= 0)
		r->kv_bytes = 2;
	if (r->headroom_bytes <= 0)
		r->headroom_bytes = 6.0 * GIB;
	if (r->runtime_bytes <= 0)
		r->runtime_bytes = 2.0 * GIB;
	if (r->gpus_per_node <= 0)
		r->gpus_per_node = r->gpu.per_node > 0 ? r->gpu.per_node : 8;
	if (r->max_gpus <= 0)
		r->max_gpus = 1024;
}

static int
bad(struct sizing_result *res, const char *why)
{
	snprintf(res->why, sizeof(res->why), "%s", why);
	return APP_EINVAL;
}

/* A tensor-parallel size: divides the heads, and splits the KV heads or
 * shares them (the engine's rule, engine/src/tp_part.c, and vLLM's; an
 * MLA latent is cached whole on every rank).  Any node count holds it:
 * see nodes_for(). */
static int
valid_tp(int g, const struct model_shape *m)
{
	int kv_ok = m->kv_latent > 0 || m->kv_heads % g == 0 || g % m->kv_heads == 0;

	return m->heads % g == 0 && kv_ok;
}

/* The fewest nodes that give g GPUs in equal shares of at most per_node
 * (the engine starts the same number of ranks on every node): 10 GPUs on
 * 8-GPU servers are 5 on each of 2, 12 are 6 on each of 2. */
static int
nodes_for(int g, int per_node)
{
	int n = (g + per_node - 1) / per_node;

	while (g % n != 0)
		n++;
	return n;
}

/* Tokens a sequence caches over all layers, in layer-tokens: the layers
 * that see everything hold the context, windowed ones at most their
 * window. */
static double
cached_layer_tokens(const struct model_shape *m, int context)
{
	int wl = m->window > 0 && m->window_layers > 0 ? m->window_layers : 0;
	int held = wl > 0 && m->window < context ? m->window : context;

	return (double)(m->layers - wl) * context + (double)wl * held;
}

/* What the placement costs beyond memory: tensor parallel puts one or two
 * all-reduces a layer on every token's path, so the link between the
 * GPUs decides generation speed once there are several. */
static void
link_warning(const struct sizing_request *r, struct sizing_result *res)
{
	const struct gpu_type *t = &r->gpu;
	size_t n = 0;

	res->warning[0] = '\0';
	if (res->gpus < 2)
		return;
	if (t->link == GPU_LINK_PCIE || (t->link == GPU_LINK_NVLINK_PAIRS && res->gpus_per_node_used > 2))
		n += (size_t)snprintf(res->warning, sizeof(res->warning),
				      "%s: tensor parallel over PCIe (%d GB/s a GPU%s, against 900 on an NVLink "
				      "board): every token's all-reduces cross it, so generation is slower than on "
				      "NVLink GPUs; fewer GPUs with more memory each avoid it. ",
				      t->name, t->link == GPU_LINK_PCIE ? t->link_gbytes : 128,
				      t->link == GPU_LINK_NVLINK_PAIRS ? " between the bridged pairs" : "");
	if (res->nodes > 1 && n < sizeof(res->warning))
		snprintf(res->warning + n, sizeof(res->warning) - n,
			 "Across %d nodes the all-reduces cross the network: an RDMA NIC a GPU (400 Gb/s in the "
			 "reference design), checked with privai-fabric validate.",
			 res->nodes);
}

/* The KV cache one of g GPUs holds, as the engine splits it: its share
 * of the KV heads (the largest share, were g not to divide them: the
 * memory bound must not count a split no engine makes); one whole head
 * when g exceeds them (g / kv_heads GPUs hold each); all of an MLA
 * latent, which every rank caches in full. */
static double
kv_per_gpu(const struct model_shape *m, double kv_total, int g)
{
	if (m->kv_latent > 0)
		return kv_total;
	if (g <= m->kv_heads)
		return kv_total * ((m->kv_heads + g - 1) / g) / m->kv_heads;
	return kv_total / m->kv_heads;
}

int
sizing_compute(const struct sizing_request *r, struct sizing_result *res)
{
	const struct model_shape *m = &r->model;

	memset(res, 0, sizeof(*res));
	if (!(m->weight_bytes > 0) || m->layers <= 0 || m->heads <= 0 || m->head_dim <= 0 ||
	    (m->kv_latent <= 0 && (m->kv_heads <= 0 || m->kv_heads > m->heads)))
		return bad(res, "the model needs weights, layers, heads, KV heads (or an MLA latent) and a head size");
	if (r->context <= 0 || r->concurrency <= 0 || r->kv_bytes <= 0 || !(r->gpu.memory_bytes > 0))
		return bad(res, "context, concurrency, KV bytes and GPU memory must be positive");
	if (m->max_context > 0 && r->context > m->max_context)
		return bad(res, "the context is longer than the model's maximum");
	/* K and V per layer per KV head, or one latent vector per layer (MLA) */
	res->kv_bytes_per_token = m->kv_latent > 0 ? (double)m->layers * m->kv_latent * r->kv_bytes
						   : 2.0 * m->layers * m->kv_heads * m->head_dim * r->kv_bytes;
	if (m->window_layers < 0 || m->window_layers > m->layers || m->window < 0)
		return bad(res, "windowed layers must be 0..layers, and the window not negative");
	res->kv_bytes_total =
		res->kv_bytes_per_token / m->layers * cached_layer_tokens(m, r->context) * (double)r->concurrency;
	res->per_gpu_usable = r->gpu.memory_bytes - r->headroom_bytes - r->runtime_bytes;
	res->total_bytes = m->weight_bytes + res->kv_bytes_total;
	if (!(res->per_gpu_usable > 0))
		return bad(res, "headroom and runtime leave no memory on this GPU");
	/* the fewest GPUs whose share fits, counting memory as the engine
	 * holds it: weights split, the KV cache split, shared or whole */
	int need = 0;
	for (int g = 1; g <= r->max_gpus && need == 0; g++)
		if (m->weight_bytes / g + kv_per_gpu(m, res->kv_bytes_total, g) <= res->per_gpu_usable)
			need = g;
	for (int g = need < 1 ? r->max_gpus + 1 : need; g <= r->max_gpus; g++) {
		if (!valid_tp(g, m))
			continue;
		double kv = kv_per_gpu(m, res->kv_bytes_total, g);
		if (m->weight_bytes / g + kv > res->per_gpu_usable)
			continue; /* a larger share of a shared KV cache */
		res->gpus = g;
		res->nodes = nodes_for(g, r->gpus_per_node);
		res->gpus_per_node_used = g / res->nodes;
		res->per_gpu_used = m->weight_bytes / g + kv + r->runtime_bytes;
		link_warning(r, res);
		if (g == need)
			snprintf(res->why, sizeof(res->why),
				 "memory: %.1f GiB of weights over %d GPUs and %.1f GiB of KV cache each fit %.1f GiB "
				 "usable per GPU",
				 m->weight_bytes / GIB, g, kv / GIB, res->per_gpu_usable / GIB);
		else
			snprintf(res->why, sizeof(res->why),
				 "memory needs %d GPUs; %d is the next count that divides %d heads%s", need, g,
				 m->heads, m->kv_latent > 0 ? "" : " and splits or shares the KV heads");
		if (res->nodes > 1) {
			size_t k = strlen(res->why);
			snprintf(res->why + k, sizeof(res->why) - k, "; %d on each of %d nodes",
				 res->gpus_per_node_used, res->nodes);
		}
		return 0;
	}
	/* more GPUs share, never split, the last KV head (or an MLA latent) */
	double least_kv = m->kv_latent > 0 ? res->kv_bytes_total : res->kv_bytes_total / m->kv_heads;
	if (least_kv > res->per_gpu_usable)
		snprintf(res->why, sizeof(res->why),
			 "does not fit: each GPU holds at least %.1f GiB of KV cache (%s at %d tokens x %d), more than "
			 "%.1f GiB usable; a shorter context or fewer sequences would",
			 least_kv / GIB, m->kv_latent > 0 ? "the whole MLA latent" : "one KV head", r->context,
			 r->concurrency, res->per_gpu_usable / GIB);
	else
		snprintf(res->why, sizeof(res->why), "does not fit in %d GPUs", r->max_gpus);
	return 0;
}

/* What a node leaves its rank: a tenth of its memory, at least 2 GiB,
 * stays with the system and the page cache. */
static double
node_usable(double bytes)
{
	double kept = bytes / 10 > 2.0 * GIB ? bytes / 10 : 2.0 * GIB;

	return bytes - kept;
}

void
sizing_cpu_split(const struct sizing_request *r, const struct sizing_result *res, const double *node_bytes, int n_nodes,
		 struct cpu_split *out)
{
	const struct model_shape *m = &r->model;
	double smallest = 0;
	int most = n_nodes < SIZING_MAX_RANKS ? n_nodes : SIZING_MAX_RANKS;

	memset(out, 0, sizeof(*out));
	for (int n = 1; n <= most; n++) {
		double u = node_usable(node_bytes[n - 1]);
		smallest = n == 1 || u < smallest ? u : smallest;
		if (n > 1 && !valid_tp(n, m))
			continue;
		double need = m->weight_bytes / n + kv_per_gpu(m, res->kv_bytes_total, n) + r->runtime_bytes;
		if (need > smallest)
			continue;
		out->ranks = n;
		out->per_rank_bytes = need;
		out->usable_bytes = smallest;
		if (n == 1)
			snprintf(out->why, sizeof(out->why), "one node holds it: %.1f GiB of the %.1f GiB it leaves",
				 need / GIB, smallest / GIB);
		else
			snprintf(out->why, sizeof(out->why),
				 "split over %d nodes, a rank each: %.1f GiB a rank, and the smallest node leaves %.1f "
				 "GiB",
				 n, need / GIB, smallest / GIB);
		return;
	}
	if (n_nodes < 1)
		snprintf(out->why, sizeof(out->why), "no node to place it on");
	else
		snprintf(out->why, sizeof(out->why),
			 "does not fit in the memory of %d node%s: %.1f GiB of weights and %.1f GiB of KV cache", most,
			 most == 1 ? "" : "s", m->weight_bytes / GIB, res->kv_bytes_total / GIB);
}
