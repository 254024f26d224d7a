/*
 * A node's ranks: --tp N --nnodes M --node-rank R --dist-init HOST:PORT
 * makes this process node R's first rank, R x N/M, and starts the node's
 * other N/M - 1 ranks as its children, so that whatever runs the engine
 * (an admin, a unit, a shell) runs one process a node, as torchrun and
 * vLLM's workers do.
 *
 * A child runs the same command line with --nnodes left out and
 * --node-rank set to its rank, which makes it a rank started apart
 * (tp.c).  On GPUs it gets its one device (NCCL runs one process a GPU):
 * the k-th of --gpus, or of CUDA_VISIBLE_DEVICES, or index k.  On CPUs
 * each rank is pinned to its own NUMA node when the node has one a rank,
 * else to an equal share of the CPUs this process may use, so that the
 * ranks do not fight over cores.
 *
 * No rank outlives the node's first: the children die with it
 * (PR_SET_PDEATHSIG, tied to the thread that forks, the main one), and a
 * child that fails ends it, naming the child, which ends the group.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define LOCAL_MAX 64

extern char **environ;

char **cli_argv;

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pid_t pid[LOCAL_MAX];
	int rank[LOCAL_MAX];
	int n, left; /* children started, not yet reaped */
	int size;
} kids = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, { 0 }, { 0 }, 0, 0, 0 };

/* Reap the children; one that fails ends this process (exit 0 is a
 * follower that rank 0 stopped). */
static void *
reaper(void *arg)
{
	(void)arg;
	for (;;) {
		int status;
		pid_t p = waitpid(-1, &status, 0);
		if (p < 0 && errno == EINTR)
			continue;
		if (p < 0)
			return NULL;
		pthread_mutex_lock(&kids.mu);
		int k = -1;
		for (int i = 0; i < kids.n; i++)
			if (kids.pid[i] == p)
				k = i;
		if (k >= 0) {
			kids.pid[k] = 0;
			kids.left--;
			pthread_cond_broadcast(&kids.cv);
		}
		pthread_mutex_unlock(&kids.mu);
		if (k < 0 || (WIFEXITED(status) && WEXITSTATUS(status) == 0))
			continue;
		char how[64];
		if (WIFEXITED(status))
			snprintf(how, sizeof(how), "exited with status %d", WEXITSTATUS(status));
		else
			snprintf(how, sizeof(how), "was killed by signal %d", WTERMSIG(status));
		fprintf(stderr,
			"privai-engine: rank %d of %d (pid %d, started by this node's first rank) %s: the group "
			"stops\n",
			kids.rank[k], kids.size, (int)p, how);
		fflush(stderr);
		_exit(3); /* the other children die with this process; remote ranks see it gone */
	}
}

/* "0-3,8,10-11" into set; -1 on anything else. */
static int
parse_cpulist(const char *s, cpu_set_t *set)
{
	CPU_ZERO(set);
	while (*s != '\0' && *s != '\n') {
		char *end;
		long lo = strtol(s, &end, 10), hi = lo;
		if (end == s || lo < 0 || lo >= CPU_SETSIZE)
			return -1;
		if (*end == '-') {
			s = end + 1;
			hi = strtol(s, &end, 10);
			if (end == s || hi < lo || hi >= CPU_SETSIZE)
				return -1;
		}
		for (long c = lo; c <= hi; c++)
			CPU_SET((int)c, set);
		s = *end == ',' ? end + 1 : end;
	}
	return 0;
}

/* Each of the n local ranks' CPUs: a NUMA node each when exactly n have
 * CPUs this process may use, else equal shares of what it may use.
 * 0 when they could not be told apart (fewer CPUs than ranks): no pins. */
static int
rank_cpus(int n, cpu_set_t *out)
{
	cpu_set_t allowed, node;
	int found = 0;

	if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0)
		return 0;
	for (int id = 0; id < 1024 && found <= n; id++) {
		char path[96], line[4096];
		snprintf(path, sizeof(path), "/sys/devices/system/node/node%d/cpulist", id);
		FILE *fp = fopen(path, "r");
		if (fp == NULL)
			continue;
		int ok = fgets(line, sizeof(line), fp) != NULL && parse_cpulist(line, &node) == 0;
		fclose(fp);
		if (!ok)
			continue;
		CPU_AND(&node, &node, &allowed);
		if (CPU_COUNT(&node) > 0 && found++ < n)
			out[found - 1] = node;
	}
	if (found == n)
		return 1;
	int total = CPU_COUNT(&allowed), seen = 0;
	if (total < n)
		return 0;
	for (int k = 0; k < n; k++)
		CPU_ZERO(&out[k]);
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &allowed)) {
			CPU_SET(c, &out[(long)seen * n / total]);
			seen++;
		}
	return 1;
}

/* set as a cpulist ("0-3,8"), cut short when it does not fit. */
static void
format_cpulist(const cpu_set_t *set, char *out, size_t size)
{
	size_t len = 0;

	out[0] = '\0';
	for (int c = 0; c < CPU_SETSIZE && len < size; c++) {
		if (!CPU_ISSET(c, set))
			continue;
		int e = c;
		while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, set))
			e++;
		len += (size_t)(e > c ? snprintf(out + len, size - len, "%s%d-%d", len ? "," : "", c, e)
				      : snprintf(out + len, size - len, "%s%d", len ? "," : "", c));
		c = e;
	}
}

/* The k-th entry of a comma list into out; -1 when it has no k-th. */
static int
list_entry(const char *list, int k, char *out, size_t size)
{
	for (int i = 0; list != NULL; i++) {
		const char *comma = strchr(list, ',');
		size_t len = comma != NULL ? (size_t)(comma - list) : strlen(list);
		if (i == k) {
			if (len == 0 || len >= size)
				return -1;
			memcpy(out, list, len);
			out[len] = '\0';
			return 0;
		}
		list = comma != NULL ? comma + 1 : NULL;
	}
	return -1;
}

static int
list_count(const char *list)
{
	int n = 1;

	for (const char *p = list; *p != '\0'; p++)
		n += *p == ',';
	return n;
}

/* Whether argv[i] is option `opt` ("--opt" then a value, or
 * "--opt=value"): how many words it takes, 0 when it is not. */
static int
is_option(char **argv, int i, const char *opt)
{
	size_t len = strlen(opt);

	if (strcmp(argv[i], opt) == 0)
		return argv[i + 1] != NULL ? 2 : 1;
	return strncmp(argv[i], opt, len) == 0 && argv[i][len] == '=';
}

/* A zeroed array with room for the n strings of NULL-terminated v and
 * `extra` more; *n is set.  NULL: out of memory. */
static char **
strv_room(char *const *v, int extra, int *n)
{
	*n = 0;
	while (v[*n] != NULL)
		(*n)++;
	return calloc((size_t)*n + (size_t)extra, sizeof(char *));
}

/* The child's command line: this one with --nnodes out, --node-rank its
 * rank, and --gpus its device when one was given.  NULL: out of memory. */
static char **
child_argv(int rank, const char *device, char *rank_buf)
{
	int n;
	char **v = strv_room(cli_argv, 3, &n);

	if (v == NULL)
		return NULL;
	int k = 0, has_rank = 0;
	snprintf(rank_buf, 16, "%d", rank);
	for (int i = 0; i < n;) {
		int w;
		if ((w = is_option(cli_argv, i, "--nnodes")) > 0) {
			i += w;
		} else if ((w = is_option(cli_argv, i, "--node-rank")) > 0) {
			v[k++] = "--node-rank";
			v[k++] = rank_buf;
			has_rank = 1;
			i += w;
		} else if ((w = is_option(cli_argv, i, "--gpus")) > 0 && device != NULL) {
			v[k++] = "--gpus";
			v[k++] = (char *)device;
			i += w;
		} else {
			v[k++] = cli_argv[i++];
		}
	}
	if (!has_rank) {
		v[k++] = "--node-rank";
		v[k++] = rank_buf;
	}
	v[k] = NULL;
	return v;
}

/* The environment with CUDA_VISIBLE_DEVICES set to device (NULL: as it
 * is).  NULL: out of memory. */
static char **
child_env(const char *device, char *var, size_t size)
{
	int n;
	char **e = strv_room(environ, 2, &n);

	if (e == NULL)
		return NULL;
	int k = 0;
	for (int i = 0; i < n; i++)
		if (device == NULL || strncmp(environ[i], "CUDA_VISIBLE_DEVICES=", 21) != 0)
			e[k++] = environ[i];
	if (device != NULL) {
		snprintf(var, size, "CUDA_VISIBLE_DEVICES=%s", device);
		e[k++] = var;
	}
	e[k] = NULL;
	return e;
}

/* One line a rank of this node: where it runs, for the log. */
static void
say_started(const char *cmd, int rank, int size, pid_t pid, const char *gpu, const cpu_set_t *cpus)
{
	char where[256] = "";

	if (gpu != NULL)
		snprintf(where, sizeof(where), ", GPU %s", gpu);
	else if (cpus != NULL) {
		char list[200];
		format_cpulist(cpus, list, sizeof(list));
		snprintf(where, sizeof(where), ", CPUs %s", list);
	}
	fprintf(stderr, "privai-engine %s: rank %d of %d on this node (pid %d%s)\n", cmd, rank, size, (int)pid, where);
}

int
cli_tp_local_start(const char *cmd, struct cli_tp *tp)
{
	int local = tp->size / tp->nnodes, first = tp->rank * local;
	cpu_set_t cpus[LOCAL_MAX];
	char dev[LOCAL_MAX][128];
	const char *devices = tp->devices != NULL ? tp->devices : getenv("CUDA_VISIBLE_DEVICES");

	if (tp->rank >= tp->nnodes)
		return cli_error(cmd, "--node-rank %d of %d nodes (0 to %d)", tp->rank, tp->nnodes, tp->nnodes - 1);
	if (local > LOCAL_MAX)
		return cli_error(cmd, "%d ranks a node: at most %d", local, LOCAL_MAX);
	if (cli_argv == NULL)
		return cli_error(cmd, "no command line to start the node's other ranks with");
	if (tp->gpu) {
		if (devices != NULL && list_count(devices) != local)
			return cli_error(cmd,
					 "%d ranks a node (--tp %d over --nnodes %d) take %d GPUs, one each; %s lists "
					 "%d",
					 local, tp->size, tp->nnodes, local,
					 tp->devices != NULL ? "--gpus" : "CUDA_VISIBLE_DEVICES", list_count(devices));
		for (int k = 0; k < local; k++)
			if (devices != NULL ? list_entry(devices, k, dev[k], sizeof(dev[k])) < 0
					    : snprintf(dev[k], sizeof(dev[k]), "%d", k) < 0)
				return cli_error(cmd, "GPU %d of '%s' is empty or too long", k, devices);
	}
	int pin = !tp->gpu && rank_cpus(local, cpus);
	pthread_t t;
	kids.size = tp->size;
	for (int k = 1; k < local; k++) {
		char rank_buf[16], var[160];
		char **argv = child_argv(first + k, tp->gpu && tp->devices != NULL ? dev[k] : NULL, rank_buf);
		char **env = child_env(tp->gpu ? dev[k] : NULL, var, sizeof(var));
		if (argv == NULL || env == NULL) {
			free(argv);
			free(env);
			return cli_error(cmd, "out of memory starting rank %d", first + k);
		}
		pid_t parent = getpid();
		pthread_mutex_lock(&kids.mu);
		pid_t p = fork();
		if (p == 0) {
			/* between fork and exec: async-signal-safe calls only */
			sigset_t none;
			sigemptyset(&none);
			sigprocmask(SIG_SETMASK, &none, NULL);
			if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
				_exit(127);
			if (pin)
				(void)sched_setaffinity(0, sizeof(cpus[k]), &cpus[k]);
			execve("/proc/self/exe", argv, env);
			_exit(127);
		}
		if (p > 0) {
			kids.pid[kids.n] = p;
			kids.rank[kids.n++] = first + k;
			kids.left++;
		}
		pthread_mutex_unlock(&kids.mu);
		free(argv);
		free(env);
		if (p < 0)
			return cli_error(cmd, "cannot start rank %d: %s", first + k, strerror(errno));
		say_started(cmd, first + k, tp->size, p, tp->gpu ? dev[k] : NULL, pin ? &cpus[k] : NULL);
	}
	if (pthread_create(&t, NULL, reaper, NULL) != 0)
		return cli_error(cmd, "cannot watch the node's other ranks");
	pthread_detach(t);
	if (pin)
		(void)sched_setaffinity(0, sizeof(cpus[0]), &cpus[0]);
	if (tp->gpu && setenv("CUDA_VISIBLE_DEVICES", dev[0], 1) != 0)
		return cli_error(cmd, "cannot set CUDA_VISIBLE_DEVICES");
	say_started(cmd, first, tp->size, getpid(), tp->gpu ? dev[0] : NULL, pin ? &cpus[0] : NULL);
	tp->rank = first;
	return 0;
}

void
cli_tp_local_wait(double seconds)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += (time_t)seconds;
	pthread_mutex_lock(&kids.mu);
	while (kids.left > 0 && pthread_cond_timedwait(&kids.cv, &kids.mu, &until) == 0)
		;
	pthread_mutex_unlock(&kids.mu);
}
