/*
 * The commands that run a model split over the ranks of a
 * tensor-parallel group (--tp N under mpirun -np N): eval, bench, serve.
 * Every rank runs the same command line; rank 0 does the command's work
 * and the others follow its forward passes.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int
cli_tp_join(const char *cmd, struct cli_tp *tp)
{
	struct coll_params p = { .size = tp->size, .deadline_s = tp->deadline_s, .init = tp->init, .rank = tp->rank };
	char err[PRIVAI_ERR_LEN];

	tp->group = NULL;
	if (tp->init == NULL && (tp->rank != 0 || tp->nnodes != 0))
		return cli_error(cmd, "--node-rank and --nnodes go with --dist-init HOST:PORT");
	/* --nnodes: this process is a node's first rank and starts the rest */
	if (tp->nnodes != 0 && tp->size % tp->nnodes != 0)
		return cli_error(cmd, "--nnodes %d does not divide --tp %d", tp->nnodes, tp->size);
	if (tp->gpu && tp->size > 1 && tp->init == NULL)
		return cli_error(cmd, "GPU ranks meet at --dist-init HOST:PORT (NCCL's bootstrap), one process a GPU");
	if (tp->init != NULL && tp->nnodes == 0 && tp->rank >= tp->size)
		return cli_error(cmd, "--node-rank %d of a group of %d (0 to %d)", tp->rank, tp->size, tp->size - 1);
	if (tp->size <= 1)
		return 0;
	/* before the node's ranks start, which take this environment */
	if (tp->gpu && cli_tp_nccl_env(cmd))
		return 1;
	if (tp->nnodes != 0 && cli_tp_local_start(cmd, tp))
		return 1;
	p.rank = tp->rank;
	if (coll_new(tp->gpu ? "nccl" : tp->init != NULL ? "gloo" : "mpi", &p, &tp->group, err) < 0)
		return cli_error(cmd, "%s", err);
	return 0;
}

int
cli_tp_fail(const char *cmd, const struct cli_tp *tp, const char *fmt, ...)
{
	char msg[PRIVAI_ERR_LEN + 256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (tp == NULL || tp->group == NULL)
		return cli_error(cmd, "%s", msg);
	/* a rank that stops alone leaves its peers waiting: end them all */
	char why[sizeof(msg) + 64];
	snprintf(why, sizeof(why), "privai-engine %s: %s", cmd, msg);
	tp->group->ops->abort(tp->group, 1, why);
	return 1;
}

int
cli_tp_follower(const struct cli_tp *tp)
{
	return tp->group != NULL && tp->group->rank != 0;
}

int
cli_tp_follow(const char *cmd, struct cli_tp *tp, struct engine_ctx *ctx)
{
	char err[PRIVAI_ERR_LEN];

	if (engine_follow(ctx, err) < 0)
		return cli_tp_fail(cmd, tp, "%s", err);
	return 0;
}

void
cli_tp_leave(struct cli_tp *tp)
{
	coll_free(tp->group);
	tp->group = NULL;
	/* the ranks this one started end once rank 0 has stopped the group */
	cli_tp_local_wait(15);
}

int
cli_tp_option(const char *cmd, int c, const char *arg, struct cli_tp *tp)
{
	float s;

	if (c == 0x7401)
		return cli_parse_int(cmd, "--tp", arg, 1, 4096, &tp->size);
	if (c == 0x7403) {
		/* checked here, before a node's ranks are started with it */
		const char *colon = strrchr(arg, ':');
		char *end = NULL;
		long port = colon != NULL ? strtol(colon + 1, &end, 10) : 0;
		if (colon == NULL || colon == arg || colon[1] == '\0' || *end != '\0' || port < 1 || port > 65535)
			return cli_error(cmd, "--dist-init takes HOST:PORT, not '%.100s' (a port of 1 to 65535)", arg);
		tp->init = arg;
		return 0;
	}
	if (c == 0x7404)
		return cli_parse_int(cmd, "--node-rank", arg, 0, 4095, &tp->rank);
	if (c == 0x7405)
		return cli_parse_int(cmd, "--nnodes", arg, 1, 4096, &tp->nnodes);
	if (c != 0x7402)
		return -1;
	if (cli_parse_float(cmd, "--tp-deadline", arg, &s))
		return 1;
	if (!(s >= 1 && s <= 86400))
		return cli_error(cmd, "--tp-deadline must be 1 to 86400 seconds, got '%s'", arg);
	tp->deadline_s = s;
	return 0;
}
