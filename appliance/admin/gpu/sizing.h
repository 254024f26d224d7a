/*
 * How many GPUs a model needs: weights + KV cache for context x
 * concurrency + runtime buffers must fit in each GPU's memory less a
 * headroom, and the tensor-parallel size must divide the number of
 * attention heads and split or share the KV heads.  Any such count is a
 * placement: beyond one node, the GPUs are spread evenly over the fewest
 * nodes that hold them (10 GPUs: 5 on each of 2 nodes), the others stay
 * free for other deployments.
 */
#ifndef PRIVAI_ADMIN_SIZING_H
#define PRIVAI_ADMIN_SIZING_H

#include <stdint.h>

struct model_shape {
	const char *name;
	double weight_bytes; /* all weights as stored */
	int layers, heads, kv_heads, head_dim;
	int kv_latent; /* MLA models: cached values per token and layer
				   * (kv_lora_rank + rope dims); 0 for MHA/GQA */
	int max_context;
	/* layers whose attention sees only the last `window` tokens (sliding
	 * window: gpt-oss; chunked local attention: Llama 4): they cache at
	 * most that many tokens a sequence.  0: every layer caches all. */
	int window_layers, window;
};

/* How a server's GPUs reach each other: the all-reduces of tensor
 * parallel cross it once or twice a layer for every token. */
enum gpu_link {
	GPU_LINK_NVLINK,       /* every GPU of a server through NVSwitch (SXM boards) */
	GPU_LINK_NVLINK_PAIRS, /* bridged pairs, PCIe between the pairs (H100 NVL) */
	GPU_LINK_PCIE,         /* PCIe only */
};

struct gpu_type {
	const char *name;
	double memory_bytes;
	enum gpu_link link;
	int link_gbytes; /* GB/s a GPU, both directions, as the vendor states it */
	int per_node;    /* GPUs in the usual server of this type */
};

struct sizing_request {
	struct model_shape model;
	struct gpu_type gpu;
	int context;           /* tokens per sequence; 0: the model's maximum */
	int concurrency;       /* sequences held at once; 0: 1 */
	int kv_bytes;          /* per cached value: 2 (f16/bf16), 1 (fp8) */
	double headroom_bytes; /* left free per GPU (driver, CUDA context, fragmentation) */
	double runtime_bytes;  /* per GPU: activations and buffers of the engine */
	int gpus_per_node;
	int max_gpus; /* give up beyond this */
};

struct sizing_result {
	double kv_bytes_per_token;
	double kv_bytes_total;
	double per_gpu_usable; /* memory - headroom - runtime */
	double total_bytes;    /* weights + KV */
	int gpus;              /* 0: does not fit within max_gpus */
	int nodes;
	int gpus_per_node_used; /* gpus / nodes: the GPUs each node gives */
	double per_gpu_used;    /* (weights + KV) / gpus + runtime */
	char why[256];          /* one line: what decided the count */
	char warning[320];      /* "" or what the placement costs (PCIe, the network) */
};

/* A model on CPU nodes split over ranks (tensor parallel, one rank a
 * node): the fewest of the nodes given, in their order (this node
 * first: rank 0 serves from it), whose memory holds each rank's share. */
#define SIZING_MAX_RANKS 16
struct cpu_split {
	int ranks;             /* 0: does not fit in the nodes given */
	double per_rank_bytes; /* weights and KV cache a rank holds, plus its buffers */
	double usable_bytes;   /* of the smallest node taken: what it leaves a rank */
	char why[256];
};

/* node_bytes[i]: node i's memory.  Each node keeps a tenth of it (at
 * least 2 GiB) for the system and the page cache, and a rank adds
 * r->runtime_bytes of buffers. */
void sizing_cpu_split(const struct sizing_request *r, const struct sizing_result *res, const double *node_bytes,
		      int n_nodes, struct cpu_split *out);

/* Fill sensible defaults (6 GiB headroom, 2 GiB runtime, f16 KV, the GPU
 * type's usual count a node, up to 1024 GPUs) into the fields left zero. */
void sizing_defaults(struct sizing_request *r);

/* 0, or APP_EINVAL with res->why naming a bad input. */
int sizing_compute(const struct sizing_request *r, struct sizing_result *res);

/* A GPU type by name ("H100-80GB", "L40S-48GB", ...), or NULL. */
const struct gpu_type *sizing_gpu(const char *name);

/* The i-th GPU type sizing knows, or NULL past the last. */
const struct gpu_type *sizing_gpu_at(int i);

/* "nvlink", "nvlink-pairs" or "pcie". */
const char *sizing_link_name(enum gpu_link link);

#endif
