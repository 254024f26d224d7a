/*
 * Shared pieces of the privai-engine subcommands: option parsing helpers and
 * the one place errors are reported to the user.
 */
#ifndef PRIVAI_CLI_H
#define PRIVAI_CLI_H

#include <stdint.h>

#include "privai/model.h"
#include "privai/status.h"

/* Report "privai-engine CMD: MESSAGE" on stderr; returns exit status 1. */
int cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Parse a decimal int in [lo, hi] from an option value. */
int cli_parse_int(const char *cmd, const char *opt, const char *s, long lo, long hi, int *ret);
int cli_parse_float(const char *cmd, const char *opt, const char *s, float *ret);
/* Parse "1,2,3" into a fresh array. */
int cli_parse_ids(const char *cmd, const char *s, int32_t **ret_ids, int *ret_n);

int cmd_run(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_lora(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_hash_key(int argc, char **argv);
int cmd_features(int argc, char **argv);

#endif

#include "privai/collective.h"
#include "privai/tokenizer.h"

/* A loaded model with its tokenizer and (optionally) a context. */
struct cli_engine {
	struct engine_model *model;
	struct tokenizer *tok;
	struct engine_ctx *ctx;
};

/* Load model and tokenizer, and a context when cp is not NULL; reports
 * errors itself.  Returns 0 or 1 (the exit status). */
int cli_engine_open(const char *cmd, const char *path, const struct engine_ctx_params *cp, struct cli_engine *e);
void cli_engine_close(struct cli_engine *e);

/* A model split over the ranks of a tensor-parallel group (tp.c):
 * --tp N under mpirun -np N (Open MPI), or --tp N --dist-init HOST:PORT
 * --node-rank R in each of N processes started apart (Gloo over TCP, or
 * NCCL on GPUs), or with --nnodes M in one process a node, which starts
 * the node's N/M ranks (tp_local.c); --tp-deadline S bounds a rank's
 * wait for its peers inside a step. */
struct cli_tp {
	int size;            /* 1: no group */
	double deadline_s;   /* 0: the transport's default */
	const char *init;    /* --dist-init, or NULL: MPI */
	int rank, nnodes;    /* --node-rank, --nnodes (0: not given) */
	int gpu;             /* the ranks run on GPUs (--device cuda): NCCL */
	const char *devices; /* --gpus: one a rank of this node, or NULL */
	struct coll *group;
};

/* GPU ranks: NCCL's topology file and nccl.env from
 * PRIVAI_NCCL_CONFIG_DIR (/etc/privai) into the environment, unless set
 * there already (tp_nccl_env.c): 0, or 1 (reported). */
int cli_tp_nccl_env(const char *cmd);

/* The command line main() was given, for the ranks a node starts. */
extern char **cli_argv;
/* Start this node's other ranks (tp->size / tp->nnodes of them in all)
 * and make tp->rank this process's rank: 0, or 1 (reported). */
int cli_tp_local_start(const char *cmd, struct cli_tp *tp);
/* Wait up to `seconds` for the ranks this process started to end. */
void cli_tp_local_wait(double seconds);
/* clang-format off */
#define CLI_TP_OPTIONS \
	{ "tp", required_argument, NULL, 0x7401 }, { "tp-deadline", required_argument, NULL, 0x7402 }, \
	{ "dist-init", required_argument, NULL, 0x7403 }, { "node-rank", required_argument, NULL, 0x7404 }, \
	{ "nnodes", required_argument, NULL, 0x7405 }
/* clang-format on */
/* Parse a CLI_TP_OPTIONS option `c` into tp: -1 when c is not one, else 0 or 1 (reported). */
int cli_tp_option(const char *cmd, int c, const char *arg, struct cli_tp *tp);
/* Join the group when tp->size > 1: 0, or 1 (reported). */
int cli_tp_join(const char *cmd, struct cli_tp *tp);
/* Report an error; on a rank of a group, end every rank (no return). */
int cli_tp_fail(const char *cmd, const struct cli_tp *tp, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Whether this process is a rank other than 0, which only follows. */
int cli_tp_follower(const struct cli_tp *tp);
/* Follow rank 0's forward passes until it stops: 0, or the group ends. */
int cli_tp_follow(const char *cmd, struct cli_tp *tp, struct engine_ctx *ctx);
/* Leave the group (every rank, after freeing its context). */
void cli_tp_leave(struct cli_tp *tp);
