/*
 * Sizing against the reference minimums in ../shared/MISSION.md (8 x
 * H100-80GB servers, full context, one sequence, f16 KV cache, 6 GiB
 * headroom and 2 GiB runtime per GPU), plus the rules on their own:
 * head divisibility, whole nodes beyond one, bad input refused.
 */
#include <math.h>
#include <string.h>

#include "status.h"
#include "testlib.h"
#include "gpu/sizing.h"

static const struct model_shape reference[] = {
	/* name, weight bytes, layers, heads, kv heads, head dim, MLA latent, max context */
	{ "Llama-3.1-405B (BF16)", 405e9 * 2, 126, 128, 8, 128, 0, 131072 },
	{ "DeepSeek-R1 (FP8)", 671e9, 61, 128, 128, 128, 576, 163840 },
	{ "Kimi-K2 (FP8)", 1.04e12, 61, 64, 64, 128, 576, 131072 },
	{ "Kimi-K2 (BF16)", 2.08e12, 61, 64, 64, 128, 576, 131072 },
	{ "Mixtral-8x22B (BF16)", 141e9 * 2, 56, 48, 8, 128, 0, 65536 },
	{ "Llama-4-Scout (BF16)", 109e9 * 2, 48, 40, 8, 128, 0, 10485760 },
};

static struct sizing_result
size(const struct model_shape *m, const char *gpu, int context, int concurrency)
{
	struct sizing_request r = {
		.model = *m, .gpu = *sizing_gpu(gpu), .context = context, .concurrency = concurrency
	};
	struct sizing_result res;

	sizing_defaults(&r);
	CHECK(sizing_compute(&r, &res) == 0, "%s: %s", m->name, res.why);
	return res;
}

int
main(void)
{
	static const struct {
		int gpus, nodes;
	} want[] = { { 16, 2 }, { 16, 2 }, { 16, 2 }, { 32, 4 }, { 4, 1 } };

	/* Scout at its 10M context: one KV head's cache is 240 GiB, and GPUs beyond 8 share KV heads */
	struct sizing_result scout = size(&reference[5], "H100-80GB", 0, 1);
	CHECK(scout.gpus == 0 && strstr(scout.why, "240.0 GiB of KV cache (one KV head at 10485760 tokens"),
	      "Scout at 10M tokens does not fit: %s", scout.why);
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		struct sizing_result r = size(&reference[i], "H100-80GB", 0, 1);
		CHECK(r.gpus == want[i].gpus && r.nodes == want[i].nodes, "%s: %d GPUs on %d nodes (want %d on %d): %s",
		      reference[i].name, r.gpus, r.nodes, want[i].gpus, want[i].nodes, r.why);
		CHECK(r.per_gpu_used <= 80.0 * 1073741824.0 - 6.0 * 1073741824.0, "%s fits with the headroom",
		      reference[i].name);
	}
	/* the KV formula: 2 x layers x kv_heads x head_dim x bytes; MLA caches one latent a layer */
	struct sizing_result r = size(&reference[0], "H100-80GB", 1, 1);
	CHECK(r.kv_bytes_per_token == 2.0 * 126 * 8 * 128 * 2, "405B KV bytes per token %.0f", r.kv_bytes_per_token);
	r = size(&reference[1], "H100-80GB", 1, 1);
	CHECK(r.kv_bytes_per_token == 61.0 * 576 * 2, "R1 (MLA) KV bytes per token %.0f", r.kv_bytes_per_token);
	/* Scout at 128k fits 4 GPUs (4 divides 40); concurrency scales the KV */
	r = size(&reference[5], "H100-80GB", 131072, 1);
	CHECK(r.gpus == 4 && r.nodes == 1, "Scout at 128k: %d GPUs (%s)", r.gpus, r.why);
	struct sizing_result c8 = size(&reference[5], "H100-80GB", 131072, 8);
	CHECK(c8.kv_bytes_total == 8 * r.kv_bytes_total && c8.gpus > r.gpus, "8 sequences need more: %d GPUs", c8.gpus);
	/* within a node a divisor of the heads that splits or shares the KV heads: Mixtral on H200 has the
	 * memory of 3 GPUs, but 3 neither divides its 8 KV heads nor is divided by them (the engine refuses it) */
	r = size(&reference[4], "H200-141GB", 0, 1);
	CHECK(r.gpus == 4 && r.nodes == 1 && strstr(r.why, "splits or shares the KV heads"),
	      "Mixtral on H200: %d GPUs (%s)", r.gpus, r.why);
	/* KV heads shared: 405B's 8 KV heads on 16 GPUs, each GPU holds one (1/8 of the cache, not 1/16) */
	r = size(&reference[0], "H100-80GB", 0, 1);
	CHECK(fabs(r.per_gpu_used - (405e9 * 2 / 16 + r.kv_bytes_total / 8 + 2.0 * 1073741824.0)) < 1e3,
	      "405B on 16 GPUs: each holds 1/8 of the KV cache (%.1f GiB used)", r.per_gpu_used / 1073741824.0);
	/* MLA: every GPU holds the whole latent cache */
	r = size(&reference[1], "H100-80GB", 0, 1);
	CHECK(fabs(r.per_gpu_used - (671e9 / 16 + r.kv_bytes_total + 2.0 * 1073741824.0)) < 1e3,
	      "R1 on 16 GPUs: each holds the whole latent cache (%.1f GiB used)", r.per_gpu_used / 1073741824.0);

	/* CPU nodes, one rank each, this node first: 405B (BF16, 754 GiB) at 8k tokens */
	{
		const double G = 1073741824.0, big[] = { 512 * G, 512 * G, 512 * G, 512 * G },
			     first_small[] = { 256 * G, 512 * G, 512 * G, 512 * G }, small[] = { 64 * G, 64 * G };
		struct sizing_request q = { .model = reference[0], .gpu = *sizing_gpu("H100-80GB"), .context = 8192 };
		struct sizing_result gr;
		struct cpu_split cs;
		sizing_defaults(&q);
		CHECK(sizing_compute(&q, &gr) == 0, "405B at 8k sized");
		sizing_cpu_split(&q, &gr, big, 4, &cs);
		CHECK(cs.ranks == 2 && fabs(cs.per_rank_bytes - (405e9 + gr.kv_bytes_total / 2 + 2 * G)) < 1e3 &&
			      fabs(cs.usable_bytes - 512 * G * 0.9) < 1e3 && strstr(cs.why, "split over 2 nodes"),
		      "405B on 512 GiB nodes: 2 ranks of %.1f GiB (%s)", cs.per_rank_bytes / G, cs.why);
		/* the first node (rank 0's) is small: 2 do not hold it, 3 does not divide 128 heads, 4 do */
		sizing_cpu_split(&q, &gr, first_small, 4, &cs);
		CHECK(cs.ranks == 4, "405B with a 256 GiB first node: 4 ranks (%d: %s)", cs.ranks, cs.why);
		sizing_cpu_split(&q, &gr, small, 2, &cs);
		CHECK(cs.ranks == 0 && strstr(cs.why, "does not fit in the memory of 2 nodes"),
		      "405B on two 64 GiB "
		      "nodes: %s",
		      cs.why);
		sizing_cpu_split(&q, &gr, small, 0, &cs);
		CHECK(cs.ranks == 0 && strstr(cs.why, "no node"), "no nodes: %s", cs.why);
		/* a small model stays on one node; a node keeps at least 2 GiB */
		struct sizing_request q8 = { .model = { "8B", 16e9, 32, 32, 8, 128, 0, 131072 },
					     .gpu = *sizing_gpu("H100-80GB"),
					     .context = 8192 };
		sizing_defaults(&q8);
		CHECK(sizing_compute(&q8, &gr) == 0, "8B sized");
		sizing_cpu_split(&q8, &gr, small, 2, &cs);
		CHECK(cs.ranks == 1 && strstr(cs.why, "one node holds it"), "8B on one node: %s", cs.why);
		const double tiny[] = { 16 * G, 16 * G };
		sizing_cpu_split(&q8, &gr, tiny, 2, &cs);
		CHECK(cs.ranks == 2 && fabs(cs.usable_bytes - 14 * G) < 1e3,
		      "8B on 16 GiB nodes: 2 ranks, 14 GiB "
		      "usable each (%d, %.1f)",
		      cs.ranks, cs.usable_bytes / G);
	}

	/* bad input */
	struct sizing_request bad = { .model = { "x", 1e9, 0, 8, 8, 64, 0, 4096 }, .gpu = *sizing_gpu("H100-80GB") };
	struct sizing_result br;
	sizing_defaults(&bad);
	CHECK(sizing_compute(&bad, &br) == APP_EINVAL && strstr(br.why, "layers"), "no layers: %s", br.why);
	bad.model.layers = 2;
	bad.model.kv_heads = 16;
	CHECK(sizing_compute(&bad, &br) == APP_EINVAL, "more KV heads than heads refused");
	bad.model.kv_heads = 8;
	bad.context = 8192;
	CHECK(sizing_compute(&bad, &br) == APP_EINVAL && strstr(br.why, "longer"), "context beyond the model: %s",
	      br.why);
	bad.context = 4096;
	bad.headroom_bytes = 100.0 * 1073741824.0;
	CHECK(sizing_compute(&bad, &br) == APP_EINVAL && strstr(br.why, "no memory"), "headroom over the card: %s",
	      br.why);
	CHECK(sizing_gpu("RTX-9090") == NULL, "unknown GPU type");
	/* a model too big for the limit */
	struct sizing_request huge = { .model = { "huge", 1e15, 10, 7, 7, 64, 0, 4096 },
				       .gpu = *sizing_gpu("A100-40GB"),
				       .max_gpus = 64 };
	sizing_defaults(&huge);
	CHECK(sizing_compute(&huge, &br) == 0 && br.gpus == 0 && strstr(br.why, "does not fit"), "too big: %s", br.why);
	return test_summary();
}
