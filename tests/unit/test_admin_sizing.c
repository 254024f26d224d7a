/*
 * Sizing against how the field deploys (docs/sizing.md's table: each row
 * here is a row there), the reference minimums of ../shared/MISSION.md
 * (8 x H100-80GB servers, full context, one sequence, f16 KV cache, 6 GiB
 * headroom and 2 GiB runtime per GPU), and the rules on their own: head
 * divisibility, GPUs spread evenly over the fewest nodes, KV heads shared
 * and MLA latents whole on every GPU, windowed layers, the PCIe warning,
 * bad input refused.
 */
#include <math.h>
#include <string.h>

#include "status.h"
#include "testlib.h"
#include "gpu/sizing.h"

#define GIB 1073741824.0

/* name (published precision), weight bytes, layers, heads, KV heads, head
 * size, MLA latent, full context, windowed layers, window */
static const struct model_shape field[] = {
	{ "Llama-3.1-8B (BF16)", 8.03e9 * 2, 32, 32, 8, 128, 0, 131072, 0, 0 },
	{ "Llama-3.1-70B (BF16)", 70.6e9 * 2, 80, 64, 8, 128, 0, 131072, 0, 0 },
	{ "Llama-3.1-405B (BF16)", 405e9 * 2, 126, 128, 8, 128, 0, 131072, 0, 0 },
	{ "Mixtral-8x22B (BF16)", 141e9 * 2, 56, 48, 8, 128, 0, 65536, 0, 0 },
	{ "Qwen3-235B-A22B (BF16)", 235e9 * 2, 94, 64, 4, 128, 0, 131072, 0, 0 },
	{ "DeepSeek-R1 (FP8)", 671e9, 61, 128, 128, 128, 576, 163840, 0, 0 },
	{ "Kimi-K2 (FP8)", 1.04e12, 61, 64, 64, 128, 576, 131072, 0, 0 },
	{ "Llama-4-Scout (BF16)", 109e9 * 2, 48, 40, 8, 128, 0, 10485760, 36, 8192 },
	{ "Llama-4-Maverick (FP8)", 400e9, 48, 40, 8, 128, 0, 1048576, 36, 8192 },
	{ "Llama-4-Maverick (BF16)", 400e9 * 2, 48, 40, 8, 128, 0, 1048576, 36, 8192 },
	{ "gpt-oss-120b (MXFP4)", 60.8 * GIB, 36, 64, 8, 64, 0, 131072, 18, 128 },
};

/* GPUs and nodes at full context and at 32k tokens, on H100-80GB and H200-141GB servers of 8 */
static const struct {
	int full_gpus, full_nodes, k32_gpus, k32_nodes;
} on_h100[] = { { 1, 1, 1, 1 },   { 4, 1, 2, 1 },  { 16, 2, 16, 2 }, { 4, 1, 4, 1 },   { 8, 1, 8, 1 }, { 16, 2, 16, 2 },
		{ 16, 2, 16, 2 }, { 40, 5, 4, 1 }, { 8, 1, 8, 1 },   { 40, 5, 40, 5 }, { 1, 1, 1, 1 } },
  on_h200[] = { { 1, 1, 1, 1 }, { 2, 1, 2, 1 }, { 8, 1, 8, 1 }, { 4, 1, 4, 1 }, { 4, 1, 4, 1 }, { 8, 1, 8, 1 },
		{ 8, 1, 8, 1 }, { 8, 1, 2, 1 }, { 4, 1, 4, 1 }, { 8, 1, 8, 1 }, { 1, 1, 1, 1 } };

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

static void
check_table(const char *gpu, const char *label, int i, int context, int want_gpus, int want_nodes)
{
	struct sizing_result r = size(&field[i], gpu, context, 1);
	const struct gpu_type *t = sizing_gpu(gpu);

	CHECK(r.gpus == want_gpus && r.nodes == want_nodes, "%s on %s at %s: %d GPUs on %d nodes (want %d on %d): %s",
	      field[i].name, gpu, label, r.gpus, r.nodes, want_gpus, want_nodes, r.why);
	CHECK(r.per_gpu_used <= t->memory_bytes - 6.0 * GIB && r.gpus_per_node_used * r.nodes == r.gpus,
	      "%s on %s at %s fits with the headroom, in equal shares a node", field[i].name, gpu, label);
}

/* the reference minimums' models, as MISSION.md states them */
static const struct model_shape reference[] = {
	{ "Llama-3.1-405B (BF16)", 405e9 * 2, 126, 128, 8, 128, 0, 131072, 0, 0 },
	{ "DeepSeek-R1 (FP8)", 671e9, 61, 128, 128, 128, 576, 163840, 0, 0 },
	{ "Kimi-K2 (FP8)", 1.04e12, 61, 64, 64, 128, 576, 131072, 0, 0 },
	{ "Kimi-K2 (BF16)", 2.08e12, 61, 64, 64, 128, 576, 131072, 0, 0 },
	{ "Mixtral-8x22B (BF16)", 141e9 * 2, 56, 48, 8, 128, 0, 65536, 0, 0 },
	/* every layer cached in full, as privai's engine does today */
	{ "Llama-4-Scout (BF16), all layers cached", 109e9 * 2, 48, 40, 8, 128, 0, 10485760, 0, 0 },
};

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
	/* docs/sizing.md's table, row by row */
	for (int i = 0; i < (int)(sizeof(field) / sizeof(field[0])); i++) {
		check_table("H100-80GB", "full context", i, 0, on_h100[i].full_gpus, on_h100[i].full_nodes);
		check_table("H100-80GB", "32k", i, 32768, on_h100[i].k32_gpus, on_h100[i].k32_nodes);
		check_table("H200-141GB", "full context", i, 0, on_h200[i].full_gpus, on_h200[i].full_nodes);
		check_table("H200-141GB", "32k", i, 32768, on_h200[i].k32_gpus, on_h200[i].k32_nodes);
	}
	/* windowed layers hold at most their window: Scout's 36 chunked layers 8192 tokens, its 12 global
	 * layers all 10M (480 GiB, 60 GiB a KV head); gpt-oss's 18 sliding layers 128 tokens */
	{
		struct sizing_result w = size(&field[7], "H100-80GB", 0, 1);
		double per_layer_token = 2.0 * 8 * 128 * 2;
		CHECK(fabs(w.kv_bytes_total - per_layer_token * (12.0 * 10485760 + 36.0 * 8192)) < 1,
		      "Scout's KV: 12 global layers at 10M tokens and 36 at 8192 (%.1f GiB)", w.kv_bytes_total / GIB);
		CHECK(w.kv_bytes_per_token == 48 * per_layer_token, "KV per token counts every layer (%.0f)",
		      w.kv_bytes_per_token);
		w = size(&field[10], "H100-80GB", 100, 1);
		CHECK(w.kv_bytes_total == 2.0 * 8 * 64 * 2 * 36 * 100,
		      "a context inside the window: all 36 layers hold it");
		struct sizing_request bw = { .model = field[10], .gpu = *sizing_gpu("H100-80GB") };
		bw.model.window_layers = 37;
		sizing_defaults(&bw);
		CHECK(sizing_compute(&bw, &w) == APP_EINVAL && strstr(w.why, "windowed layers"),
		      "more windowed layers than layers refused: %s", w.why);
	}
	/* any divisor of the heads that fits, spread evenly over the fewest nodes: a 40-head MHA model (13B,
	 * BF16, 4k tokens) at 200 sequences needs 10 H100s: 5 on each of 2 nodes, 6 of 16 left free; at 100
	 * sequences 5 of one node's 8 */
	{
		const struct model_shape mha = { "13B MHA (BF16)", 13e9 * 2, 40, 40, 40, 128, 0, 4096, 0, 0 };
		struct sizing_result t = size(&mha, "H100-80GB", 4096, 200);
		CHECK(t.gpus == 10 && t.nodes == 2 && t.gpus_per_node_used == 5 &&
			      strstr(t.why, "5 on each of 2 nodes"),
		      "10 of 16 GPUs over 2 servers: %d on %d (%d a node): %s", t.gpus, t.nodes, t.gpus_per_node_used,
		      t.why);
		CHECK(strstr(t.warning, "Across 2 nodes") && !strstr(t.warning, "PCIe"), "NVLink over 2 nodes: %s",
		      t.warning);
		t = size(&mha, "H100-80GB", 4096, 100);
		CHECK(t.gpus == 5 && t.nodes == 1 && t.gpus_per_node_used == 5 && t.warning[0] == '\0',
		      "5 of 8 in one server: %d on %d (%s)", t.gpus, t.nodes, t.warning);
		/* 20 GPUs are not 8 + 8 + 4 (ranks come in equal shares a node) but 5 on each of 4 */
		t = size(&mha, "H100-80GB", 4096, 442);
		CHECK(t.gpus == 20 && t.nodes == 4 && t.gpus_per_node_used == 5, "20 GPUs: %d on %d (%d a node): %s",
		      t.gpus, t.nodes, t.gpus_per_node_used, t.why);
		/* 12 GPUs on 8-GPU servers: 6 on each of 2 (a 48-head MHA model at 172 sequences) */
		const struct model_shape mha48 = { "30B MHA (BF16)", 30e9 * 2, 48, 48, 48, 128, 0, 4096, 0, 0 };
		t = size(&mha48, "H100-80GB", 4096, 172);
		CHECK(t.gpus == 12 && t.nodes == 2 && t.gpus_per_node_used == 6, "12 GPUs: %d on %d (%d a node): %s",
		      t.gpus, t.nodes, t.gpus_per_node_used, t.why);
	}
	/* the GPU types the field uses, with their links; PCIe-only ones warn when split */
	{
		static const char *const names[] = { "H100-80GB", "H200-141GB",    "B200-180GB",     "A100-80GB",
						     "A100-40GB", "H100-NVL-94GB", "H100-PCIe-80GB", "L40S-48GB",
						     "L4-24GB",   "A10-24GB" };
		int n = 0;
		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
			CHECK(sizing_gpu(names[i]) != NULL && sizing_gpu(names[i])->link_gbytes > 0, "GPU type %s",
			      names[i]);
		while (sizing_gpu_at(n) != NULL)
			n++;
		CHECK(n == (int)(sizeof(names) / sizeof(names[0])) && sizing_gpu_at(-1) == NULL, "%d GPU types listed",
		      n);
		CHECK(sizing_gpu("L40S-48GB")->link == GPU_LINK_PCIE &&
			      sizing_gpu("H100-80GB")->link == GPU_LINK_NVLINK &&
			      strcmp(sizing_link_name(GPU_LINK_NVLINK_PAIRS), "nvlink-pairs") == 0,
		      "links");
		/* 70B in BF16 at full context: 8 L40S (48 GB) in one server, all-reduces over PCIe Gen4 */
		struct sizing_result l = size(&field[1], "L40S-48GB", 0, 1);
		CHECK(l.gpus == 8 && l.nodes == 1 && strstr(l.warning, "over PCIe (64 GB/s"),
		      "70B on L40S: %d GPUs: %s", l.gpus, l.warning);
		/* 8B on one L4 (24 GB) at 4k: no split, no warning; at 32k the KV cache takes a second */
		l = size(&field[0], "L4-24GB", 4096, 1);
		CHECK(l.gpus == 1 && l.warning[0] == '\0', "8B at 4k on one L4: %d (%s)", l.gpus, l.warning);
		l = size(&field[0], "L4-24GB", 32768, 1);
		CHECK(l.gpus == 2 && strstr(l.warning, "PCIe"), "8B at 32k on L4s: %d (%s)", l.gpus, l.warning);
		/* A10 servers hold 4: 70B needs 16 of them, 4 servers */
		l = size(&field[1], "A10-24GB", 32768, 1);
		CHECK(l.gpus == 16 && l.nodes == 4 && l.gpus_per_node_used == 4 && strstr(l.warning, "PCIe") &&
			      strstr(l.warning, "Across 4 nodes"),
		      "70B at 32k on 4-GPU A10 servers: %d on %d: %s", l.gpus, l.nodes, l.warning);
		/* H100 NVL: a bridged pair is NVLink, four GPUs cross PCIe between the pairs */
		l = size(&field[1], "H100-NVL-94GB", 32768, 1);
		CHECK(l.gpus == 2 && l.warning[0] == '\0', "70B at 32k on an H100 NVL pair: %d (%s)", l.gpus,
		      l.warning);
		l = size(&field[1], "H100-NVL-94GB", 0, 2);
		CHECK(l.gpus == 4 && strstr(l.warning, "between the bridged pairs"),
		      "70B, 2 sequences at full context, on 4 H100 NVL: %d (%s)", l.gpus, l.warning);
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
