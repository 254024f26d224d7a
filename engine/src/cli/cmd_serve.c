/*
 * privai-engine serve: the OpenAI-compatible server.
 *
 * The HTTP listener comes up first (so /health says 503 while the model
 * loads), then the model, the scheduler, and sd_notify READY.  The main
 * thread then only waits for signals: SIGHUP rereads the API key file,
 * SIGTERM/SIGINT drain (no new requests, running ones finish or are
 * cancelled at the deadline) and exit 0.
 */
#include <libgen.h>
#include <microhttpd.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "cli.h"
#include "privai/compute.h"
#include "privai/lora.h"
#include "privai/scheduler.h"
#include "server/server.h"

struct serve_opts {
	const char *model, *host, *key_file, *chat_template, *name, *device, *gpus;
	int tensor_parallel;
	float gpu_mem; /* --gpu-memory-utilization: the share of the GPU the KV pool may fill up to */
	int port, n_ctx, parallel, batch, threads, queue, kv_mib, drain_s, max_body_mib, max_conn;
	int max_conn_client; /* -1: half of max_conn */
	float header_timeout, min_body_rate;
	float stream_interval_ms;                   /* --stream-interval-ms */
	int allow_unknown;                          /* --allow-unknown-fields */
	int fixed_threads;                          /* --fixed-threads */
	int max_threads;                            /* --max-threads */
	int embeddings;                             /* --embeddings */
	const char *lora[ENGINE_MAX_LORA];          /* --lora NAME=PATH */
	const char *lora_dir[SERVER_MAX_LORA_DIRS]; /* --lora-dir DIR, repeatable */
	int n_lora, n_lora_dir;
	const char *pooling; /* --pooling mean|last */
	struct cli_tp tp;    /* --tp N: CPU ranks under mpirun */
};

static void
serve_usage(FILE *fp)
{
	fputs("usage: privai-engine serve -m MODEL [options]\n"
	      "  --host ADDR            listen address (default 127.0.0.1)\n"
	      "  --port N               port (default 8000; 0 picks a free one)\n"
	      "  --api-key-file FILE    bearer keys, one per line (plain or sha256:HEX); SIGHUP rereads\n"
	      "  --model-name NAME      the id clients send as \"model\" (default: file name)\n"
	      "  --ctx N                longest sequence (default: model's, capped at 4096)\n"
	      "  --parallel N           sequences decoded together (default 16)\n"
	      "  --batch N              tokens per forward pass (default 256)\n"
	      "  --kv-cache-mib N       KV cache size (default: room for --parallel full contexts, max 4096;\n"
	      "                         on cuda: what --gpu-memory-utilization leaves)\n"
	      "  --gpu-memory-utilization F  with --device cuda: this engine's share of the GPU's memory\n"
	      "                         for weights, buffers and the KV cache, whatever other processes\n"
	      "                         hold, and at most what is free (default 0.9)\n"
	      "  --queue N              requests waiting beyond --parallel before 429 (default 256)\n"
	      "  --chat-template NAME   llama2, llama3, mistral, chatml, phi3, gemma, deepseek, deepseek3\n"
	      "  --threads N            compute threads (default: the physical cores it may use)\n"
	      "  --fixed-threads        keep every thread at work while other processes hold the CPUs\n"
	      "                         (default: fall back to one thread until they are free)\n"
	      "  --max-threads N        without --threads: start up to N threads and run as many as the\n"
	      "                         CPUs it may use have cores, more when they grow (its affinity\n"
	      "                         or cgroup changed under it); default: the cores at start\n"
	      "  --device NAME          backend: cpu (default) or cuda where the build has it\n"
	      "  --gpus UUID[,UUID...]  with --device cuda: the GPUs or the one MIG instance to use\n"
	      "  --tensor-parallel N    with --device cuda: GPUs the model is split over (default: all of --gpus)\n"
	      "  --tp N                 the model split over N CPU ranks: run under mpirun -np N; rank 0\n"
	      "                         serves HTTP, the others follow its forward passes\n"
	      "  --tp-deadline S        seconds a rank waits for a peer inside a step before the group\n"
	      "                         stops, naming the rank that did not answer (default 60)\n"
	      "  --dist-init HOST:PORT  with --tp N: ranks started apart (one a node, each by its own\n"
	      "                         admin) meet here, where rank 0 listens; Gloo over TCP, not MPI\n"
	      "  --node-rank R          this process's rank in such a group (0 serves HTTP); with\n"
	      "                         --nnodes, this node's number\n"
	      "  --nnodes M             one process a node: it starts the node's --tp/M ranks, pinned\n"
	      "                         to a NUMA node or a share of the CPUs each, or a GPU each\n"
	      "                         (the k-th of --gpus)\n"
	      "  --max-body-mib N       largest request body (default 4)\n"
	      "  --max-connections N    concurrent connections (default 256)\n"
	      "  --max-connections-per-client N  of them from one address (default: half; 0: no cap);\n"
	      "                         beyond a cap, the connection longest waiting for headers is closed\n"
	      "  --header-timeout S     seconds a client has to send its request headers (default 10)\n"
	      "  --stream-interval-ms N a stream writes at most once in N ms, the tokens of the\n"
	      "                         meantime together; the first token and the end at once\n"
	      "                         (default 1; 0: every token as it comes)\n"
	      "  --min-body-rate B      bytes a second a request body must average (default 1024; 0: none)\n"
	      "  --drain-timeout S      seconds SIGTERM waits for running requests (default 30)\n"
	      "  --allow-unknown-fields let request fields no endpoint reads through (default: 400 naming them)\n"
	      "  --embeddings           serve /v1/embeddings (on by itself for a model whose GGUF says how\n"
	      "                         it pools); pooled as the GGUF says, else the last token\n"
	      "  --pooling mean|last    pool embeddings so (implies --embeddings)\n"
	      "  --lora NAME=PATH       a LoRA adapter (GGUF), served as model NAME (or MODEL:NAME); up to 16,\n"
	      "                         applied on the fly (cpu backend)\n"
	      "  --lora-dir DIR         allow POST /v1/load_lora_adapter and /v1/unload_lora_adapter, for\n"
	      "                         adapter files under DIR (up to 16 directories)\n",
	      fp);
}

static int
parse(int argc, char **argv, struct serve_opts *o)
{
	const char *cmd = "serve";

	*o = (struct serve_opts){ .host = "127.0.0.1",
				  .port = 8000,
				  .parallel = 16,
				  .batch = 256,
				  .queue = 256,
				  .drain_s = 30,
				  .max_body_mib = 4,
				  .max_conn = 256,
				  .max_conn_client = -1,
				  .header_timeout = 10.0f,
				  .min_body_rate = 1024.0f,
				  .stream_interval_ms = 1.0f,
				  .tp = { .size = 1 },
				  .device = "cpu",
				  .gpu_mem = 0.9f };
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		int rc = 0;
		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			serve_usage(stdout);
			exit(0);
		} else if (strcmp(a, "--allow-unknown-fields") == 0) {
			o->allow_unknown = 1;
			continue; /* takes no value */
		} else if (strcmp(a, "--fixed-threads") == 0) {
			o->fixed_threads = 1;
			continue; /* takes no value */
		} else if (strcmp(a, "--embeddings") == 0) {
			o->embeddings = 1;
			continue;
		} else if (strcmp(a, "--lora") == 0) {
			const char *eq = v != NULL ? strchr(v, '=') : NULL;
			if (v != NULL && (eq == NULL || eq == v || eq[1] == '\0' || memchr(v, ':', (size_t)(eq - v))))
				rc = cli_error(cmd, "--lora takes NAME=PATH (a name without ':'), not '%s'", v);
			else if (v != NULL && o->n_lora == ENGINE_MAX_LORA)
				rc = cli_error(cmd, "at most %d --lora adapters", ENGINE_MAX_LORA);
			else if (v != NULL)
				o->lora[o->n_lora++] = v;
		} else if (strcmp(a, "--lora-dir") == 0) {
			if (v != NULL && o->n_lora_dir == SERVER_MAX_LORA_DIRS)
				rc = cli_error(cmd, "at most %d --lora-dir directories", SERVER_MAX_LORA_DIRS);
			else if (v != NULL)
				o->lora_dir[o->n_lora_dir++] = v;
		} else if (strcmp(a, "--pooling") == 0) {
			o->pooling = v;
			if (v != NULL && strcmp(v, "mean") != 0 && strcmp(v, "last") != 0)
				rc = cli_error(cmd, "--pooling must be mean or last, not '%s'", v);
		} else if (strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0) {
			o->model = v;
		} else if (strcmp(a, "--host") == 0) {
			o->host = v;
		} else if (strcmp(a, "--api-key-file") == 0) {
			o->key_file = v;
		} else if (strcmp(a, "--chat-template") == 0) {
			o->chat_template = v;
		} else if (strcmp(a, "--model-name") == 0) {
			o->name = v;
		} else if (strcmp(a, "--device") == 0) {
			o->device = v;
		} else if (strcmp(a, "--gpus") == 0) {
			o->gpus = v;
		} else if (strcmp(a, "--tensor-parallel") == 0) {
			rc = cli_parse_int(cmd, a, v, 1, 64, &o->tensor_parallel);
		} else if (strcmp(a, "--tp") == 0) {
			rc = cli_tp_option(cmd, 0x7401, v, &o->tp);
		} else if (strcmp(a, "--tp-deadline") == 0) {
			rc = cli_tp_option(cmd, 0x7402, v, &o->tp);
		} else if (strcmp(a, "--dist-init") == 0) {
			rc = cli_tp_option(cmd, 0x7403, v, &o->tp);
		} else if (strcmp(a, "--node-rank") == 0) {
			rc = cli_tp_option(cmd, 0x7404, v, &o->tp);
		} else if (strcmp(a, "--nnodes") == 0) {
			rc = cli_tp_option(cmd, 0x7405, v, &o->tp);
		} else if (strcmp(a, "--port") == 0) {
			rc = cli_parse_int(cmd, a, v, 0, 65535, &o->port);
		} else if (strcmp(a, "--ctx") == 0) {
			rc = cli_parse_int(cmd, a, v, 16, 1 << 20, &o->n_ctx);
		} else if (strcmp(a, "--parallel") == 0) {
			rc = cli_parse_int(cmd, a, v, 1, 1024, &o->parallel);
		} else if (strcmp(a, "--batch") == 0) {
			rc = cli_parse_int(cmd, a, v, 1, 8192, &o->batch);
		} else if (strcmp(a, "--gpu-memory-utilization") == 0) {
			rc = cli_parse_float(cmd, a, v, &o->gpu_mem);
			if (rc == 0 && !(o->gpu_mem > 0.0f && o->gpu_mem <= 1.0f))
				rc = cli_error(cmd, "--gpu-memory-utilization must be above 0 and at most 1");
		} else if (strcmp(a, "--kv-cache-mib") == 0) {
			rc = cli_parse_int(cmd, a, v, 1, 1 << 20, &o->kv_mib);
		} else if (strcmp(a, "--queue") == 0) {
			rc = cli_parse_int(cmd, a, v, 0, 1 << 20, &o->queue);
		} else if (strcmp(a, "--threads") == 0) {
			rc = cli_parse_int(cmd, a, v, 1, 1024, &o->threads);
		} else if (strcmp(a, "--max-threads") == 0) {
			rc = cli_parse_int(cmd, a, v, 1, 1024, &o->max_threads);
		} else if (strcmp(a, "--max-body-mib") == 0) {
			rc = cli_parse_int(cmd, a, v, 1, 1024, &o->max_body_mib);
		} else if (strcmp(a, "--max-connections") == 0) {
			rc = cli_parse_int(cmd, a, v, 1, 65536, &o->max_conn);
		} else if (strcmp(a, "--max-connections-per-client") == 0) {
			rc = cli_parse_int(cmd, a, v, 0, 65536, &o->max_conn_client);
		} else if (strcmp(a, "--header-timeout") == 0) {
			rc = cli_parse_float(cmd, a, v, &o->header_timeout);
			if (rc == 0 && !(o->header_timeout >= 0.1f && o->header_timeout <= 3600.0f))
				rc = cli_error(cmd, "--header-timeout must be between 0.1 and 3600 seconds");
		} else if (strcmp(a, "--min-body-rate") == 0) {
			rc = cli_parse_float(cmd, a, v, &o->min_body_rate);
			if (rc == 0 && !(o->min_body_rate >= 0.0f && o->min_body_rate <= 1e9f))
				rc = cli_error(cmd, "--min-body-rate must be between 0 and 1e9 bytes a second");
		} else if (strcmp(a, "--stream-interval-ms") == 0) {
			rc = cli_parse_float(cmd, a, v, &o->stream_interval_ms);
			if (rc == 0 && !(o->stream_interval_ms >= 0.0f && o->stream_interval_ms <= 1000.0f))
				rc = cli_error(cmd, "--stream-interval-ms must be between 0 and 1000");
		} else if (strcmp(a, "--drain-timeout") == 0) {
			rc = cli_parse_int(cmd, a, v, 0, 3600, &o->drain_s);
		} else {
			serve_usage(stderr);
			return cli_error(cmd, "unknown option '%s'", a);
		}
		if (rc != 0)
			return rc;
		if (v == NULL)
			return cli_error(cmd, "%s needs a value", a);
		i++;
	}
	if (o->model == NULL)
		return cli_error(cmd, "-m MODEL is required");
	if (strcmp(o->device, "cpu") != 0 && strcmp(o->device, "cuda") != 0)
		return cli_error(cmd, "unknown --device '%s' (cpu or cuda)", o->device);
	if (o->max_threads > 0 && (o->threads > 0 || o->fixed_threads))
		return cli_error(cmd, "--max-threads is for a pool that follows its CPUs: not with %s",
				 o->threads > 0 ? "--threads" : "--fixed-threads");
	if (strcmp(o->device, "cpu") == 0 && (o->gpus != NULL || o->tensor_parallel > 0))
		return cli_error(cmd, "--gpus and --tensor-parallel are for --device cuda");
	/* one GPU or one MIG instance a process, which the CUDA backend then
	 * sees as device 0; several are a node's ranks, one a GPU (--tp N
	 * --nnodes M: tp_local.c gives each its own) */
	if (o->gpus != NULL && (strchr(o->gpus, ',') != NULL || o->tensor_parallel > 1) && o->tp.nnodes == 0)
		return cli_error(cmd,
				 "--gpus %s: a process runs on one GPU or MIG instance; to split a model over "
				 "several, --tp N --nnodes M --dist-init HOST:PORT starts a rank a GPU",
				 o->gpus);
	o->tp.gpu = strcmp(o->device, "cuda") == 0;
	o->tp.devices = o->gpus;
	if (o->tp.size > 1 && (o->n_lora > 0 || o->n_lora_dir > 0))
		return cli_error(cmd, "LoRA adapters do not run on a model split over ranks (--tp %d)", o->tp.size);
	if (o->gpus != NULL && setenv("CUDA_VISIBLE_DEVICES", o->gpus, 1) != 0)
		return cli_error(cmd, "cannot set CUDA_VISIBLE_DEVICES");
	/* the admin checks 'features' before it asks for a GPU; this is for
	 * a hand-written command line, or a node that lost its driver */
	char why[PRIVAI_ERR_LEN];
	if (compute_probe(o->device, NULL, why) < 0)
		return cli_error(cmd, "--device %s: %s (see 'privai-engine features'; --device cpu runs without it)",
				 o->device, why);
	if (o->chat_template != NULL && chat_family_by_name(o->chat_template) == CHAT_NONE)
		return cli_error(cmd, "unknown chat template '%s' (known: %s)", o->chat_template, chat_family_names());
	return 0;
}

/* How /v1/embeddings pools: --pooling, else the GGUF's
 * {arch}.pooling_type (which also turns embeddings on), else the last
 * token with --embeddings; SCHED_POOL_NONE when not served. */
static int
pick_pooling(const struct serve_opts *o, const struct gguf_file *f, int *ret)
{
	const char *arch = NULL;
	char key[128];
	uint32_t type = 0;

	*ret = SCHED_POOL_NONE;
	if (o->pooling != NULL) {
		*ret = strcmp(o->pooling, "mean") == 0 ? SCHED_POOL_MEAN : SCHED_POOL_LAST;
		return 0;
	}
	if (gguf_get_str(f, "general.architecture", &arch, NULL) == 0 && arch != NULL) {
		snprintf(key, sizeof(key), "%s.pooling_type", arch);
		if (gguf_get_u32(f, key, &type, NULL) == 0 && type != 0) {
			/* llama.cpp's numbering: 1 mean, 2 cls, 3 last, 4 rank */
			if (type != 1 && type != 3)
				return cli_error("serve",
						 "%s is %u (cls or rank pooling), which this engine does not do; "
						 "pass --pooling mean|last to pool otherwise",
						 key, type);
			*ret = type == 1 ? SCHED_POOL_MEAN : SCHED_POOL_LAST;
			return 0;
		}
	}
	if (o->embeddings)
		*ret = SCHED_POOL_LAST;
	return 0;
}

/* The --lora adapters, loaded and handed to the context, their names to
 * the server under the numbers the context gave them. */
static int
load_loras(const struct serve_opts *o, struct cli_engine *e, struct server *srv, char *err)
{
	int r;

	srv->model = e->model;
	for (int i = 0; i < o->n_lora; i++) {
		const char *eq = strchr(o->lora[i], '=');
		struct lora_adapter *a = NULL;
		char *name = strndup(o->lora[i], (size_t)(eq - o->lora[i]));
		if (name == NULL)
			return privai_fail(err, PRIVAI_ENOMEM, "out of memory");
		if (server_find_lora(srv, name) != 0) {
			privai_fail(err, PRIVAI_EINVAL, "--lora %s is given twice", name);
			free(name);
			return PRIVAI_EINVAL;
		}
		if ((r = lora_load(eq + 1, e->model, 1.0f, &a, err)) < 0 ||
		    (r = engine_ctx_add_lora(e->ctx, a, err)) <= 0) {
			lora_free(a);
			free(name);
			return r < 0 ? r : PRIVAI_EINVAL;
		}
		srv->lora_names[r - 1] = name;
		srv->lora_ptr[r - 1] = a;
	}
	return PRIVAI_OK;
}

/* The chat format: named, else recognised from the model's template. */
static int
pick_chat(const struct serve_opts *o, const struct gguf_file *f, enum chat_family *ret)
{
	const char *tmpl = NULL;

	if (o->chat_template != NULL) {
		*ret = chat_family_by_name(o->chat_template);
		return 0;
	}
	if (gguf_get_str(f, "tokenizer.chat_template", &tmpl, NULL) < 0 || tmpl == NULL) {
		*ret = CHAT_NONE;
		return 0;
	}
	if ((*ret = chat_family_detect(tmpl)) == CHAT_NONE)
		return cli_error("serve",
				 "the model's chat template is not one this server knows; "
				 "pass --chat-template NAME (%s)",
				 chat_family_names());
	return 0;
}

static int
kv_blocks(const struct serve_opts *o, const struct engine_model *m, int n_ctx)
{
	const struct model_hparams *hp = &m->hp;
	/* both backends keep K and V in half precision */
	double per_block = 2.0 * hp->n_layer * hp->n_head_kv * hp->head_dim * 2.0 * ENGINE_KV_BLOCK;
	long min = (n_ctx + ENGINE_KV_BLOCK - 1) / ENGINE_KV_BLOCK;
	long want = o->kv_mib > 0 ? (long)(o->kv_mib * 1048576.0 / per_block) : (long)o->parallel * min;
	if (o->kv_mib == 0 && want * per_block > 4096.0 * 1048576.0)
		want = (long)(4096.0 * 1048576.0 / per_block);
	return (int)(want < min ? min : want);
}

static int
run_until_signalled(struct server *srv, struct scheduler *sched, int drain_s)
{
	sigset_t set;
	int sig;
	char err[PRIVAI_ERR_LEN];

	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	for (;;) {
		if (sigwait(&set, &sig) != 0)
			continue;
		if (sig == SIGHUP) {
			if (server_reload_keys(srv, err) < 0)
				fprintf(stderr, "privai-engine serve: keeping the old API keys: %s\n", err);
			else
				fprintf(stderr, "privai-engine serve: API keys reloaded\n");
			continue;
		}
		break;
	}
	sd_notify(0, "STOPPING=1\nSTATUS=draining");
	fprintf(stderr, "privai-engine serve: draining (up to %d s)\n", drain_s);
	int aborted = scheduler_drain(sched, drain_s * 1000);
	server_quiesce(srv);
	/* let finished responses reach their clients */
	for (int i = 0; i < 40; i++) {
		const union MHD_DaemonInfo *di = MHD_get_daemon_info(srv->daemon, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
		if (di == NULL || di->num_connections == 0)
			break;
		usleep(50000);
	}
	fprintf(stderr, "privai-engine serve: stopped (%d requests cancelled at the deadline)\n", aborted);
	return 0;
}

/* The context every rank of a group creates alike: the same sizes, or
 * their caches would not line up. */
static struct engine_ctx_params
ctx_params(const struct serve_opts *o, const struct engine_model *m)
{
	struct engine_ctx_params cp = { .n_ctx = o->n_ctx,
					.n_batch = o->batch,
					.n_threads = o->threads,
					.fixed_threads = o->fixed_threads,
					.max_threads = o->max_threads,
					.device = o->device,
					.group = o->tp.group };
	int n_ctx = o->n_ctx > 0 ? o->n_ctx : (m->hp.n_ctx_train < 4096 ? m->hp.n_ctx_train : 4096);

	/* on a GPU, as vLLM: the pool gets what the budget leaves */
	if (strcmp(o->device, "cuda") == 0 && o->kv_mib == 0)
		cp.mem_fraction = o->gpu_mem;
	else
		cp.n_kv_blocks = kv_blocks(o, m, n_ctx);
	return cp;
}

/* A follower told to stop (mpirun forwards SIGTERM; the admin's child
 * runner sends it when the admin dies) waits for rank 0 to drain and stop
 * the group, and ends by itself if rank 0 never does. */
static void *
follower_watchdog(void *arg)
{
	const struct serve_opts *o = arg;
	sigset_t set;
	int sig;

	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	if (sigwait(&set, &sig) == 0) {
		sleep((unsigned)o->drain_s + 10);
		fprintf(stderr,
			"privai-engine serve: a follower rank: signal %d and no stop from rank 0 in %d s: ending\n",
			sig, o->drain_s + 10);
		_exit(1);
	}
	return NULL;
}

/* A rank other than 0: no HTTP, no scheduler; its part of every forward
 * pass rank 0 runs, until rank 0 stops.  SIGTERM does not end it at once:
 * rank 0 drains and then stops the group (follower_watchdog). */
static void
start_watchdog(struct serve_opts *o)
{
	static int started;
	pthread_t dog;

	if (!started && pthread_create(&dog, NULL, follower_watchdog, o) == 0) {
		pthread_detach(dog);
		started = 1;
	}
}

static int
serve_follow(struct serve_opts *o)
{
	start_watchdog(o);
	struct engine_ctx_params cp;
	struct cli_engine e;
	char err[PRIVAI_ERR_LEN];
	int rc = 1;

	if (cli_engine_open("serve", o->model, NULL, &e) != 0)
		return cli_tp_fail("serve", &o->tp, "%s: the model cannot be loaded on this rank", o->model);
	cp = ctx_params(o, e.model);
	if (engine_ctx_new(e.model, &cp, &e.ctx, err) < 0) {
		cli_error("serve", "rank %d: %s", o->tp.group->rank, err);
	} else {
		struct engine_ctx_info ci;
		engine_ctx_info(e.ctx, &ci);
		fprintf(stderr,
			"privai-engine serve: rank %d of %d (%s) follows rank 0; it holds %.1f MiB of weights\n",
			ci.tp_rank, ci.tp_size, o->tp.group->ops->name, (double)ci.weight_bytes / (1 << 20));
		rc = cli_tp_follow("serve", &o->tp, e.ctx);
		fprintf(stderr, "privai-engine serve: rank %d: %s\n", ci.tp_rank,
			rc == 0 ? "rank 0 stopped the group" : "the group failed");
	}
	cli_engine_close(&e);
	cli_tp_leave(&o->tp);
	return rc;
}

int
cmd_serve(int argc, char **argv)
{
	struct serve_opts o;
	struct server srv;
	struct server_config cfg = { 0 };
	struct cli_engine e;
	struct scheduler *sched = NULL;
	enum chat_family chat;
	char err[PRIVAI_ERR_LEN], name[256];
	sigset_t set;
	int rc;

	if ((rc = parse(argc, argv, &o)) != 0)
		return rc;
	/* every thread created from here on inherits the blocked signals */
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
	/* a follower started apart knows its rank already: its watchdog runs
	 * while it waits for the others too */
	if (o.tp.init != NULL && o.tp.rank > 0)
		start_watchdog(&o);
	if (cli_tp_join("serve", &o.tp))
		return 1;
	if (cli_tp_follower(&o.tp))
		return serve_follow(&o);
	snprintf(name, sizeof(name), "%s", o.name ? o.name : o.model);
	cfg = (struct server_config){ .host = o.host,
				      .port = o.port,
				      .api_key_file = o.key_file,
				      .model_id = o.name ? o.name : basename(name),
				      .max_body = (size_t)o.max_body_mib << 20,
				      .max_connections = o.max_conn,
				      .max_connections_per_client = o.max_conn_client,
				      .header_timeout = o.header_timeout,
				      .min_body_rate = o.min_body_rate,
				      .allow_unknown_fields = o.allow_unknown,
				      .stream_interval = o.stream_interval_ms * 1e-3,
				      .n_lora_dirs = o.n_lora_dir };
	memcpy(cfg.lora_dirs, o.lora_dir, sizeof(o.lora_dir));
	if (server_start(&srv, &cfg, err) < 0)
		return cli_tp_fail("serve", &o.tp, "%s", err);
	fprintf(stderr, "privai-engine serve: listening on %s:%d, loading %s\n", cfg.host, srv.port, o.model);
	/* lets the integration test see /health answer 503 while loading */
	const char *delay = getenv("PRIVAI_SERVE_LOAD_DELAY_MS");
	if (delay != NULL)
		usleep((useconds_t)atoi(delay) * 1000);
	int pooling;
	if (cli_engine_open("serve", o.model, NULL, &e) != 0 || pick_chat(&o, e.model->file, &chat) != 0 ||
	    pick_pooling(&o, e.model->file, &pooling) != 0) {
		server_stop(&srv);
		cli_engine_close(&e);
		return cli_tp_fail("serve", &o.tp, "%s: the model cannot be served", o.model);
	}
	struct engine_ctx_params cp = ctx_params(&o, e.model);
	serving_metrics_init(&srv.metrics);
	struct scheduler_params sp = { o.parallel, o.queue, serving_metrics_observer(&srv.metrics) };
	if (engine_ctx_new(e.model, &cp, &e.ctx, err) < 0 || load_loras(&o, &e, &srv, err) < 0 ||
	    scheduler_new(e.ctx, e.tok, &sp, &sched, err) < 0) {
		server_free_loras(&srv);
		server_stop(&srv);
		cli_engine_close(&e);
		cli_tp_leave(&o.tp);
		return cli_error("serve", "%s", err);
	}
	struct engine_ctx_info ci;
	engine_ctx_info(e.ctx, &ci);
	srv.metrics.kv_cache_bytes = (double)ci.kv_bytes;
	srv.metrics.device_memory_bytes = (double)ci.mem_total;
	srv.metrics.device_budget_bytes = (double)ci.mem_budget;
	srv.metrics.tp_group = o.tp.group;
	srv.metrics.tp_weight_bytes = (double)ci.weight_bytes;
	srv.pooling = pooling;
	srv.n_embd = ci.n_embd;
	if (server_set_ready(&srv, sched, e.tok, chat, ci.n_ctx, err) < 0) {
		server_stop(&srv);
		scheduler_free(sched);
		cli_engine_close(&e);
		cli_tp_leave(&o.tp);
		return cli_error("serve", "%s", err);
	}
	if (ci.tp_size > 1)
		fprintf(stderr, "privai-engine serve: split over %d ranks (%s); rank 0 holds %.1f MiB of weights\n",
			ci.tp_size, o.tp.group->ops->name, (double)ci.weight_bytes / (1 << 20));
	sd_notifyf(0, "READY=1\nSTATUS=serving %s", cfg.model_id);
	fprintf(stderr,
		"privai-engine serve: ready: model %s on %s, context %d, %d sequences, KV %d blocks (%zu MiB), "
		"chat template %s, embeddings %s, %s\n",
		cfg.model_id, ci.device, ci.n_ctx, o.parallel, ci.n_kv_blocks, ci.kv_bytes >> 20,
		chat_family_name(chat),
		pooling == SCHED_POOL_MEAN   ? "mean"
		: pooling == SCHED_POOL_LAST ? "last-token"
					     : "off",
		o.key_file ? "API keys required" : "no API keys");
	run_until_signalled(&srv, sched, o.drain_s);
	server_stop(&srv);
	scheduler_free(sched);
	cli_engine_close(&e);
	cli_tp_leave(&o.tp);
	server_free_loras(&srv);
	return 0;
}

int
cmd_hash_key(int argc, char **argv)
{
	char *line = NULL, out[80];
	size_t cap = 0;
	ssize_t n;

	if (argc > 1) {
		fputs("usage: privai-engine hash-key < KEY   (prints the sha256: line for --api-key-file)\n",
		      argc > 1 && strcmp(argv[1], "--help") == 0 ? stdout : stderr);
		return argc > 1 && strcmp(argv[1], "--help") == 0 ? 0 : 2;
	}
	if ((n = getline(&line, &cap, stdin)) <= 0) {
		free(line);
		return cli_error("hash-key", "no key on standard input");
	}
	while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
		line[--n] = '\0';
	if (n < 8) {
		free(line);
		return cli_error("hash-key", "an API key must be at least 8 characters");
	}
	api_key_hash_text(line, (size_t)n, out);
	free(line);
	puts(out);
	return 0;
}
