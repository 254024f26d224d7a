/*
 * privai-fabric validate: run the field's measurements on this node,
 * each tool under a deadline, and hold each figure against its pass mark
 * (validate.h).  The report is printed and kept (PRIVAI_FABRIC_VALIDATION,
 * default /var/lib/privai-fabric/validation.json), where serve's status
 * and so the console find it.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fabric.h"
#include "fm_unit.h"
#include "fabric_cmd.h"
#include "hostfs.h"
#include "status.h"
#include "validate.h"

#define OUTPUT_MAX (256 * 1024)
#define LIBEXEC "/usr/lib/privai/" /* where the package puts privai-nccl-perf */
#define IB_BASE_PORT 18515

struct tool {
	pid_t pid;
	int fd;
	char *out;
	size_t len;
	int status; /* wait status once reaped */
	int timed_out;
};

/* Start argv (looked up on PATH) in a process group of its own, its
 * output and errors into one pipe.  0, or an APP_E* code. */
static int
tool_start(char *const argv[], struct tool *t)
{
	int p[2];

	memset(t, 0, sizeof(*t));
	t->fd = -1;
	if ((t->out = malloc(OUTPUT_MAX + 1)) == NULL)
		return APP_ENOMEM;
	t->out[0] = '\0';
	if (pipe2(p, O_CLOEXEC) < 0)
		return APP_EIO;
	if ((t->pid = fork()) < 0) {
		close(p[0]);
		close(p[1]);
		return APP_EIO;
	}
	if (t->pid == 0) {
		setpgid(0, 0);
		dup2(p[1], 1);
		dup2(p[1], 2);
		execvp(argv[0], argv);
		if (errno == ENOENT && strncmp(argv[0], "privai-", 7) == 0) {
			char path[128];
			snprintf(path, sizeof(path), LIBEXEC "%s", argv[0]);
			execv(path, argv);
		}
		_exit(errno == ENOENT ? 127 : 126);
	}
	setpgid(t->pid, t->pid); /* as the child does: the group exists before any kill */
	close(p[1]);
	t->fd = p[0];
	return 0;
}

/* Read its output until it ends or the deadline passes; then the group
 * gets SIGTERM, and SIGKILL a second later. */
static void
tool_finish(struct tool *t, long long deadline)
{
	while (t->fd >= 0) {
		long long left = deadline - fm_now_ms();
		struct pollfd pf = { t->fd, POLLIN, 0 };
		if (left <= 0) {
			t->timed_out = 1;
			break;
		}
		int r = poll(&pf, 1, (int)(left > 1000 ? 1000 : left));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			continue;
		char buf[4096];
		ssize_t n = read(t->fd, buf, sizeof(buf));
		if (n <= 0)
			break;
		size_t keep = t->len + (size_t)n > OUTPUT_MAX ? OUTPUT_MAX - t->len : (size_t)n;
		memcpy(t->out + t->len, buf, keep);
		t->len += keep;
		t->out[t->len] = '\0';
	}
	if (t->fd >= 0)
		close(t->fd);
	t->fd = -1;
	if (t->timed_out) {
		kill(-t->pid, SIGTERM);
		for (int i = 0; i < 20 && waitpid(t->pid, &t->status, WNOHANG) == 0; i++)
			usleep(50000);
		kill(-t->pid, SIGKILL);
	}
	while (waitpid(t->pid, &t->status, 0) < 0 && errno == EINTR)
		;
}

static void
tool_free(struct tool *t)
{
	free(t->out);
	t->out = NULL;
}

/* Why a finished tool gave no figure, or NULL when it exited 0. */
static const char *
tool_failure(const struct tool *t, const char *name, char *buf, size_t size)
{
	if (t->timed_out)
		snprintf(buf, size, "%s did not finish within its deadline and was killed", name);
	else if (WIFEXITED(t->status) && WEXITSTATUS(t->status) == 127 && t->len == 0)
		snprintf(buf, size, "%s is not installed (not on PATH%s)", name,
			 strncmp(name, "privai-", 7) == 0 ? " nor in " LIBEXEC : "");
	else if (WIFSIGNALED(t->status))
		snprintf(buf, size, "%s died of signal %d", name, WTERMSIG(t->status));
	else if (WEXITSTATUS(t->status) != 0)
		snprintf(buf, size, "%s exited with status %d: %.200s", name, WEXITSTATUS(t->status),
			 t->len > 200 ? t->out + t->len - 200 : t->out);
	else
		return NULL;
	return buf;
}

struct opts {
	int rdma, nccl, json, save;
	int deadline_s;
	const char *nccl_init; /* host:port of node 0, for the all-reduce across nodes */
	int nnodes, node_rank;
};

/* The first active port of NIC k, or NULL. */
static const struct rdma_port *
port_of(const struct fabric *f, int k)
{
	const struct rdma_dev *r = &f->nic_rdma[k];

	for (int p = 0; p < r->n_ports; p++)
		if (r->port[p].state == 4)
			return &r->port[p];
	return NULL;
}

/* One ib_write_bw run from NIC a (server) to NIC b (client) on loopback,
 * from host memory or (gpu >= 0) from that GPU's memory. */
static void
rdma_pair(const struct fabric *f, const struct opts *o, int a, int b, int gpu, int round, cJSON *tests)
{
	const struct rdma_port *pa = port_of(f, a), *pb = port_of(f, b);
	char name[96], dev[2][32], ibport[2][16], tcp[16], dur[16], cuda[24], why[320];
	const char *kind = gpu >= 0 ? "rdma-gdr" : "rdma";
	struct tool srv, cli;
	double gbits;

	snprintf(name, sizeof(name), "%s -> %s%s", f->nic_rdma[a].name, f->nic_rdma[b].name,
		 gpu >= 0 ? " (GPU memory)" : "");
	snprintf(dev[0], sizeof(dev[0]), "%s", f->nic_rdma[a].name);
	snprintf(dev[1], sizeof(dev[1]), "%s", f->nic_rdma[b].name);
	snprintf(ibport[0], sizeof(ibport[0]), "%d", pa->num);
	snprintf(ibport[1], sizeof(ibport[1]), "%d", pb->num);
	snprintf(tcp, sizeof(tcp), "%d", IB_BASE_PORT + round);
	snprintf(dur, sizeof(dur), "%d", o->deadline_s > 12 ? 5 : 2);
	snprintf(cuda, sizeof(cuda), "--use_cuda=%d", gpu);
	char *args[2][20];
	for (int side = 0; side < 2; side++) {
		int n = 0;
		char **v = args[side];
		v[n++] = "ib_write_bw";
		v[n++] = "-d";
		v[n++] = dev[side];
		v[n++] = "-i";
		v[n++] = ibport[side];
		v[n++] = "-p";
		v[n++] = tcp;
		v[n++] = "-D";
		v[n++] = dur;
		v[n++] = "-s";
		v[n++] = "1048576";
		v[n++] = "-F";
		v[n++] = "--report_gbits";
		if (gpu >= 0)
			v[n++] = cuda;
		if (side == 1)
			v[n++] = "127.0.0.1";
		v[n] = NULL;
	}
	long long deadline = fm_now_ms() + (long long)o->deadline_s * 1000;
	if (tool_start(args[0], &srv) < 0) {
		tool_free(&srv);
		validate_not_run(tests, kind, name, "error", "cannot start ib_write_bw");
		return;
	}
	usleep(300000); /* the server listens before the client calls */
	if (tool_start(args[1], &cli) < 0) {
		tool_finish(&srv, fm_now_ms());
		tool_free(&srv);
		tool_free(&cli);
		validate_not_run(tests, kind, name, "error", "cannot start ib_write_bw");
		return;
	}
	tool_finish(&cli, deadline);
	tool_finish(&srv, cli.timed_out ? fm_now_ms() : fm_now_ms() + 2000);
	const char *fail = tool_failure(&cli, "ib_write_bw", why, sizeof(why));
	if (fail != NULL) {
		cJSON *r =
			validate_not_run(tests, kind, name, strstr(fail, "not installed") ? "skipped" : "error", fail);
		if (strstr(fail, "not installed"))
			cJSON_AddItemToArray(cJSON_GetObjectItem(r, "hints"),
					     cJSON_CreateString("apt-get install perftest"));
	} else if (validate_parse_ib_bw(cli.out, &gbits, why, sizeof(why)) < 0) {
		validate_not_run(tests, kind, name, "error", why);
	} else {
		double rate = (double)(pa->rate_mbps < pb->rate_mbps ? pa->rate_mbps : pb->rate_mbps) / 1000;
		char mark_why[160];
		snprintf(mark_why, sizeof(mark_why), "%.0f %% of the ports' %.0f Gb/s link rate",
			 VALIDATE_RDMA_FRACTION * 100, rate);
		cJSON *r = validate_result(tests, kind, name, gbits, "Gb/s", rate * VALIDATE_RDMA_FRACTION, mark_why);
		if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(r, "state")), "fail") == 0)
			validate_rdma_hints(f, a, b, gpu >= 0, cJSON_GetObjectItem(r, "hints"));
	}
	tool_free(&srv);
	tool_free(&cli);
}

/* ib_write_bw between the NICs paired with GPUs, two by two; from GPU
 * memory as well where nvidia_peermem is loaded. */
static void
rdma_tests(const struct fabric *f, const struct opts *o, cJSON *tests)
{
	const struct topo *t = &f->topo;
	int nics[TOPO_MAX_NICS], gpu_of[TOPO_MAX_NICS], n = 0, round = 0;

	for (int g = 0; g < t->n_gpus; g++) {
		int k = t->gpu_nic[g], dup = 0;
		for (int i = 0; i < n; i++)
			dup |= nics[i] == k;
		if (k >= 0 && !dup && f->nic_rdma[k].name[0] != '\0' && port_of(f, k) != NULL) {
			gpu_of[n] = g;
			nics[n++] = k;
		}
	}
	if (n < 2) {
		validate_not_run(tests, "rdma", "NIC pairs", "skipped",
				 n == 0 ? "no GPU has a paired RDMA NIC with an active port"
					: "one RDMA NIC with an active port: a pair needs two");
		return;
	}
	for (int i = 0; i < n; i += 2) {
		int a = nics[i], b = nics[i + 1 < n ? i + 1 : 0];
		rdma_pair(f, o, a, b, -1, round++, tests);
		if (f->peermem)
			rdma_pair(f, o, a, b, gpu_of[i], round++, tests);
	}
	if (!f->peermem) {
		cJSON *r = validate_not_run(tests, "rdma-gdr", "GPU memory", "skipped",
					    "nvidia_peermem is not loaded: no GPUDirect RDMA to measure");
		cJSON_AddItemToArray(cJSON_GetObjectItem(r, "hints"),
				     cJSON_CreateString(
					     "modprobe nvidia_peermem (and list it in /etc/modules-load.d)"));
	}
}

/* privai-nccl-perf over the node's GPUs, or over the nodes. */
static void
nccl_test(const struct fabric *f, const struct opts *o, int across, cJSON *tests)
{
	const char *kind = across ? "nccl-nodes" : "nccl-node";
	char gpus[16], nn[16], nr[16], why[320], name[64], mark_why[200];
	char *argv[16];
	int n = 0, wrong;
	struct tool t;
	double busbw, mark;
	long long largest;

	snprintf(gpus, sizeof(gpus), "%d", f->topo.n_gpus);
	snprintf(nn, sizeof(nn), "%d", o->nnodes);
	snprintf(nr, sizeof(nr), "%d", o->node_rank);
	snprintf(name, sizeof(name), across ? "all-reduce over %d nodes" : "all-reduce over %d GPUs",
		 across ? o->nnodes : f->topo.n_gpus);
	argv[n++] = "privai-nccl-perf";
	argv[n++] = "-g";
	argv[n++] = gpus;
	argv[n++] = "-b";
	argv[n++] = "1M";
	argv[n++] = "-e";
	argv[n++] = "1G";
	if (across) {
		argv[n++] = "--init";
		argv[n++] = (char *)o->nccl_init;
		argv[n++] = "--nnodes";
		argv[n++] = nn;
		argv[n++] = "--node-rank";
		argv[n++] = nr;
	}
	argv[n] = NULL;
	if (tool_start(argv, &t) < 0) {
		tool_free(&t);
		validate_not_run(tests, kind, name, "error", "cannot start privai-nccl-perf");
		return;
	}
	tool_finish(&t, fm_now_ms() + (long long)o->deadline_s * 1000);
	const char *fail = tool_failure(&t, "privai-nccl-perf", why, sizeof(why));
	if (fail != NULL) {
		validate_not_run(tests, kind, name, "error", fail);
	} else if (validate_parse_nccl(t.out, &busbw, &largest, &wrong, why, sizeof(why)) < 0) {
		validate_not_run(tests, kind, name, "error", why);
	} else if (wrong > 0) {
		snprintf(why, sizeof(why), "%d result row%s had wrong values: a GPU, link or NIC corrupts data", wrong,
			 wrong == 1 ? "" : "s");
		validate_not_run(tests, kind, name, "error", why);
	} else {
		if (!across) {
			double ref = validate_nvlink_reference(f);
			mark = ref * VALIDATE_NVLINK_FRACTION;
			if (ref > 0)
				snprintf(mark_why, sizeof(mark_why),
					 "%.0f %% of the ~%.0f GB/s an NVLink board of these GPUs reaches",
					 100 * VALIDATE_NVLINK_FRACTION, ref);
			else
				snprintf(mark_why, sizeof(mark_why), "no NVLink board: no reference figure");
		} else {
			double nics_gbytes = 0;
			for (int k = 0; k < f->topo.n_nics; k++) {
				const struct rdma_port *p = f->topo.nic_gpu[k] >= 0 ? port_of(f, k) : NULL;
				nics_gbytes += p != NULL && p->rate_mbps > 0 ? (double)p->rate_mbps / 8000 : 0;
			}
			mark = nics_gbytes * VALIDATE_NODES_FRACTION;
			snprintf(mark_why, sizeof(mark_why),
				 "%.0f %% of the paired NICs' %.0f GB/s (count x rate: a ring crosses each once)",
				 100 * VALIDATE_NODES_FRACTION, nics_gbytes);
		}
		cJSON *r = validate_result(tests, kind, name, busbw, "GB/s", mark, mark_why);
		cJSON_AddNumberToObject(r, "bytes", (double)largest);
		if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(r, "state")), "fail") == 0)
			validate_nccl_hints(f, across, cJSON_GetObjectItem(r, "hints"));
	}
	tool_free(&t);
}

static void
print_report(const cJSON *report)
{
	const cJSON *r;

	cJSON_ArrayForEach (r, cJSON_GetObjectItem(report, "tests")) {
		const char *state = cJSON_GetStringValue(cJSON_GetObjectItem(r, "state"));
		const cJSON *m = cJSON_GetObjectItem(r, "measured"), *mark = cJSON_GetObjectItem(r, "mark"), *h;
		printf("%-8s %-10s %s", state, cJSON_GetStringValue(cJSON_GetObjectItem(r, "kind")),
		       cJSON_GetStringValue(cJSON_GetObjectItem(r, "name")));
		if (cJSON_IsNumber(m))
			printf(": %.2f %s", m->valuedouble, cJSON_GetStringValue(cJSON_GetObjectItem(r, "unit")));
		if (cJSON_IsNumber(mark))
			printf(" (pass mark %.2f: %s)", mark->valuedouble,
			       cJSON_GetStringValue(cJSON_GetObjectItem(r, "mark_why")));
		if (cJSON_GetObjectItem(r, "why"))
			printf(": %s", cJSON_GetStringValue(cJSON_GetObjectItem(r, "why")));
		printf("\n");
		cJSON_ArrayForEach (h, cJSON_GetObjectItem(r, "hints"))
			printf("         hint: %s\n", h->valuestring);
	}
	printf("%d passed, %d failed, %d not run\n", cJSON_GetObjectItem(report, "passed")->valueint,
	       cJSON_GetObjectItem(report, "failed")->valueint, cJSON_GetObjectItem(report, "not_run")->valueint);
}

int
cmd_validate(struct fabric_opts *fo, int argc, char **argv)
{
	struct opts o = { 0, 0, 0, 1, 120, NULL, 1, 0 };
	struct fabric f;
	char err[256];
	int passed = 0, failed = 0, not_run = 0;
	const cJSON *r;

	for (int i = 0; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0)
			o.json = 1;
		else if (strcmp(argv[i], "--rdma") == 0)
			o.rdma = 1;
		else if (strcmp(argv[i], "--nccl") == 0)
			o.nccl = 1;
		else if (strcmp(argv[i], "--no-save") == 0)
			o.save = 0;
		else if (strcmp(argv[i], "--deadline") == 0 && i + 1 < argc)
			o.deadline_s = atoi(argv[++i]);
		else if (strcmp(argv[i], "--nccl-init") == 0 && i + 1 < argc)
			o.nccl_init = argv[++i];
		else if (strcmp(argv[i], "--nnodes") == 0 && i + 1 < argc)
			o.nnodes = atoi(argv[++i]);
		else if (strcmp(argv[i], "--node-rank") == 0 && i + 1 < argc)
			o.node_rank = atoi(argv[++i]);
		else
			return fabric_usage_error("validate", argv[i]);
	}
	if (o.deadline_s < 1 || o.deadline_s > 3600 || o.nnodes < 1 || o.nnodes > 64 || o.node_rank < 0 ||
	    o.node_rank >= o.nnodes || (o.nnodes > 1) != (o.nccl_init != NULL))
		return fabric_fail("validate", "--deadline takes 1..3600 seconds, --nnodes 1..64 with a --node-rank "
					       "below it, and more than one node needs --nccl-init HOST:PORT");
	if (!o.rdma && !o.nccl)
		o.rdma = o.nccl = 1;
	if (fabric_read(fo->root, fabric_live(fo), &f, err, sizeof(err)) < 0)
		return fabric_fail("validate", err);
	cJSON *report = cJSON_CreateObject(), *tests = cJSON_AddArrayToObject(report, "tests");
	cJSON_AddNumberToObject(report, "checked_at", (double)time(NULL));
	if (o.rdma)
		rdma_tests(&f, &o, tests);
	if (o.nccl && f.topo.n_gpus == 0)
		validate_not_run(tests, "nccl-node", "all-reduce", "skipped", "no GPU on this node");
	else if (o.nccl) {
		nccl_test(&f, &o, 0, tests);
		if (o.nnodes > 1)
			nccl_test(&f, &o, 1, tests);
	}
	cJSON_ArrayForEach (r, tests) {
		const char *s = cJSON_GetStringValue(cJSON_GetObjectItem(r, "state"));
		passed += strcmp(s, "pass") == 0 || strcmp(s, "no-mark") == 0;
		failed += strcmp(s, "fail") == 0 || strcmp(s, "error") == 0;
		not_run += strcmp(s, "skipped") == 0;
	}
	cJSON_AddNumberToObject(report, "passed", passed);
	cJSON_AddNumberToObject(report, "failed", failed);
	cJSON_AddNumberToObject(report, "not_run", not_run);
	int rc = failed > 0 ? 1 : 0;
	if (o.save) {
		char *text = cJSON_PrintUnformatted(report);
		if (text == NULL ||
		    hostfs_install(fo->root, fo->s.validation_file, text, strlen(text), 0644, NULL) < 0) {
			fprintf(stderr, "privai-fabric validate: cannot keep the report in %s: %s\n",
				fo->s.validation_file, strerror(errno ? errno : ENOMEM));
			rc = 2;
		}
		free(text);
	}
	if (o.json)
		fabric_print_json(report);
	else
		print_report(report);
	cJSON_Delete(report);
	fabric_free(&f);
	return rc;
}
