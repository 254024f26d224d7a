/* Starting, watching, restarting and stopping engine processes. */
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "status.h"
#include "strfmt.h"
#include "admin.h"
#include "log.h"
#include "hostfs.h"
#include "store/db.h"
#include "store/tasks.h"
#include "deploy/deployments.h"
#include "deploy/runner.h"
#include "deploy/supervisor.h"
#include "deploy/cpuset.h"
#include "models/models.h"

#define TICK_MS 500
#define STOP_GRACE_MS 30000
#define BACKOFF_MAX_MS 60000
#define LOG_ROTATE_BYTES (16 << 20)

struct proc {
	int64_t id;
	pid_t pid; /* 0: not running (waiting out a backoff, or stopped) */
	int port;
	int ready;
	int fails; /* exits since it was last ready */
	int64_t backoff_until_ms;
	int64_t stop_sent_ms;    /* 0: no SIGTERM sent */
	atomic_int restart;      /* asked to restart with new settings */
	char key[72];            /* the admin's own key on this engine */
	struct engine_cpus cpus; /* where it runs (deploy/cpuset.h); pooled: node is its home */
	int dedicated;           /* its CPUs are its own: others are given none of them */
	int pooled;              /* threads 0: it runs on the CPUs no engine holds, as they change */
	struct proc *next;
};

/* Only the supervisor thread changes procs; it takes mu for each change
 * that other threads may read (the list, pid, ready, port, key), and
 * never holds mu while it takes the store's mutex: other threads take
 * the store's mutex first, then mu. */
struct supervisor {
	struct admin *a;
	pthread_t thread;
	pthread_mutex_t mu; /* procs' shared fields, stop, kicked */
	pthread_cond_t cv;
	int stop, kicked;
	atomic_int alive;
	struct runner *runner; /* used by the supervisor thread only, and by stop after it ends */
	struct proc *procs;
	char sysfs[4096]; /* the host's /sys, under its --sys-root: NUMA nodes */
};

/* a deployment row as the reconciler needs it */
struct want {
	int64_t id;
	char name[72];
	int run; /* desired = running */
	char state[16];
	char model_path[4096];
	int model_ready;
	int port;
	char *placement, *options;
	char *loras; /* JSON array of "NAME=PATH", the base model's ready LoRA adapters */
};

/* serve's arguments: 20 of its own, two per adapter and per directory
 * adapters may be loaded from at run time (the model roots) */
#define ENGINE_ARGC (24 + 2 * ADAPTERS_MAX + 2 * ADMIN_MAX_MODEL_ROOTS)

int
deploy_file(struct admin *a, int64_t id, const char *name, char *out, size_t size)
{
	return str_fmt(out, size, "%s/deployments/%lld%s%s", a->cfg.state_dir, (long long)id, name ? "/" : "",
		       name ? name : "");
}

/* A start is a task (store/tasks.h) from loading until ready, failed or
 * stopped; the caller holds the store's mutex. */
static void
start_task(struct admin *a, int64_t id, const char *state, const char *reason)
{
	char ref[40], name[160] = "deployment";
	int64_t now = admin_now();
	sqlite3_stmt *st;

	snprintf(ref, sizeof(ref), "deployment:%lld", (long long)id);
	if (strcmp(state, "loading") == 0) {
		if (sqlite3_prepare_v2(a->db, "SELECT name FROM deployments WHERE id = ?1", -1, &st, NULL) ==
		    SQLITE_OK) {
			sqlite3_bind_int64(st, 1, id);
			if (sqlite3_step(st) == SQLITE_ROW)
				snprintf(name, sizeof(name), "%s", (const char *)sqlite3_column_text(st, 0));
			sqlite3_finalize(st);
		}
		task_begin(a->db, "deployment.start", ref, name, "system", now);
		task_update(a->db, ref, -1, "the engine started and is loading the model", now);
	} else if (strcmp(state, "ready") == 0) {
		task_finish(a->db, ref, 1, "ready: the engine answers", now);
	} else if (strcmp(state, "failed") == 0 || strcmp(state, "stopped") == 0) {
		task_finish(a->db, ref, 0, reason != NULL ? reason : state, now);
	}
}

static void
set_row(struct supervisor *s, int64_t id, const char *state, const char *reason, pid_t pid, int restarted)
{
	struct admin *a = s->a;
	sqlite3_stmt *st;
	char unit[96] = "", err[APP_ERR_LEN];

	if (pid > 0)
		runner_unit_name(s->runner, id, unit, sizeof(unit));
	pthread_mutex_lock(&a->db_mu);
	if (sqlite3_prepare_v2(a->db,
			       "UPDATE deployments SET state = ?1, pid = ?3, unit = ?7, "
			       /* a drain's reason stays while the drain does (2: a node
			        * holding a rank of a split one went away) */
			       "reason = CASE WHEN ?2 IS NULL AND drained != 0 THEN reason ELSE ?2 END, "
			       "restarts = restarts + ?4, updated_at = ?5, "
			       "started_at = CASE WHEN ?1 = 'loading' THEN ?5 ELSE started_at END WHERE id = ?6 "
			       "AND node_id IS NULL " /* a row moved away is its new node's */
			       /* nor is an engine ready that was asked to stop since
			        * this tick read the row: the next tick stops it */
			       "AND (?1 != 'ready' OR desired = 'running')",
			       -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_text(st, 1, state, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 2, reason, -1, SQLITE_TRANSIENT);
		if (pid > 0)
			sqlite3_bind_int(st, 3, pid);
		else
			sqlite3_bind_null(st, 3);
		sqlite3_bind_int(st, 4, restarted);
		sqlite3_bind_int64(st, 5, admin_now());
		sqlite3_bind_int64(st, 6, id);
		if (unit[0] != '\0')
			sqlite3_bind_text(st, 7, unit, -1, SQLITE_STATIC);
		else
			sqlite3_bind_null(st, 7);
	}
	if (db_write(a->db, st, err) != APP_OK)
		log_warn("deployment %lld: state %s not recorded: %s", (long long)id, state, err);
	else if (sqlite3_changes(a->db) > 0)
		start_task(a, id, state, reason);
	pthread_mutex_unlock(&a->db_mu);
}

/* A row an API call marked "stopping" whose engine runs on: its state
 * before, with no task begun or finished (the engine's start goes on). */
static void
keep_running(struct supervisor *s, int64_t id, const char *state)
{
	struct admin *a = s->a;
	sqlite3_stmt *st;
	char err[APP_ERR_LEN];

	pthread_mutex_lock(&a->db_mu);
	if (sqlite3_prepare_v2(a->db,
			       "UPDATE deployments SET state = ?1, updated_at = ?2 WHERE id = ?3 AND node_id IS NULL "
			       "AND state = 'stopping' AND desired = 'running'",
			       -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_text(st, 1, state, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 2, admin_now());
		sqlite3_bind_int64(st, 3, id);
	}
	if (db_write(a->db, st, err) != APP_OK)
		log_warn("deployment %lld: state %s not recorded: %s", (long long)id, state, err);
	pthread_mutex_unlock(&a->db_mu);
}

/* The key file: the admin's own key and every active user key, as
 * sha256: lines, written beside and renamed over the old one. */
static int
write_keys(struct admin *a, int64_t id, const char *own_key)
{
	char path[4200], tmp[4300];
	unsigned char h[crypto_hash_sha256_BYTES];
	char hex[65];
	sqlite3_stmt *st;

	if (deploy_file(a, id, "api-keys", path, sizeof(path)) != APP_OK ||
	    str_fmt(tmp, sizeof(tmp), "%s.tmp", path) != APP_OK)
		return APP_ERANGE;
	FILE *fp = fopen(tmp, "w");
	if (fp == NULL)
		return APP_EIO;
	crypto_hash_sha256(h, (const unsigned char *)own_key, strlen(own_key));
	sodium_bin2hex(hex, sizeof(hex), h, sizeof(h));
	fprintf(fp, "# written by privai-admin; edits are lost\nsha256:%s\n", hex);
	if (sqlite3_prepare_v2(a->db,
			       "SELECT key_sha256 FROM deployment_keys WHERE deployment_id = ? AND "
			       "revoked_at IS NULL",
			       -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, id);
		while (sqlite3_step(st) == SQLITE_ROW)
			fprintf(fp, "sha256:%s\n", (const char *)sqlite3_column_text(st, 0));
		sqlite3_finalize(st);
	}
	/* one the leader placed here also answers the leader's relay key */
	if (sqlite3_prepare_v2(a->db,
			       "SELECT leader_key_sha256 FROM membership WHERE leader_key_sha256 IS NOT NULL "
			       "AND EXISTS (SELECT 1 FROM deployments WHERE id = ?1 AND leader_id IS NOT NULL)",
			       -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, id);
		if (sqlite3_step(st) == SQLITE_ROW)
			fprintf(fp, "sha256:%s\n", (const char *)sqlite3_column_text(st, 0));
		sqlite3_finalize(st);
	}
	int bad = fflush(fp) != 0 || fsync(fileno(fp)) != 0;
	bad |= fclose(fp) != 0;
	if (bad || rename(tmp, path) != 0) {
		unlink(tmp);
		return APP_EIO;
	}
	return 0;
}

/* argv for `privai-engine serve`, strings in buf: its length, or
 * APP_ERANGE when an argument does not fit its buffer. */
static int
build_argv(struct supervisor *s, const struct want *w, struct proc *p, char **argv, char buf[][4200])
{
	struct admin *a = s->a;
	int n = 0, k = 0;
	cJSON *pl = cJSON_Parse(w->placement), *op = cJSON_Parse(w->options);
	const cJSON *v;
	char dir[4096];

	/* an argument cut short would be another path or value: none is */
	int cut = deploy_file(a, w->id, NULL, dir, sizeof(dir)) != APP_OK;
#define ARG(...) (cut |= str_fmt(buf[k], sizeof(buf[k]), __VA_ARGS__) != APP_OK, argv[n++] = buf[k++])
	ARG("%s", a->cfg.engine_bin);
	ARG("serve");
	ARG("-m");
	ARG("%s", w->model_path);
	ARG("--host");
	ARG("127.0.0.1");
	ARG("--port");
	ARG("%d", p->port);
	ARG("--model-name");
	ARG("%s", w->name);
	ARG("--api-key-file");
	ARG("%s/api-keys", dir);
	/* every client reaches the engine through this admin, from loopback:
	 * the engine's per-address cap would cap them all together (the
	 * admin limits its own clients) */
	ARG("--max-connections-per-client");
	ARG("0");
	const cJSON *kind = cJSON_GetObjectItem(pl, "kind");
	cpu_set_t every;
	if ((v = cJSON_GetObjectItem(pl, "threads")) != NULL && cJSON_IsNumber(v) && v->valueint > 0) {
		ARG("--threads");
		ARG("%d", v->valueint);
	} else if ((kind == NULL || (cJSON_IsString(kind) && strcmp(kind->valuestring, "cpu") == 0)) &&
		   cJSON_GetObjectItem(pl, "ranks") == NULL && sched_getaffinity(0, sizeof(every), &every) == 0 &&
		   CPU_COUNT(&every) > 1) {
		/* a shared engine follows the CPUs no placement holds
		 * (reshare): threads for all of them, those past the cores
		 * it has now asleep (threadpool_adapt.h) */
		ARG("--max-threads");
		ARG("%d", CPU_COUNT(&every));
	}
	/* a rank of a model split over nodes: rank 0 here listens for the
	 * others on the host other nodes reach this console at; a follower
	 * (a member's rank) meets it where the leader said.  On GPUs each
	 * node's engine is the node's process of the group and starts a rank
	 * a GPU (--nnodes): "rank" is then the node's number. */
	const cJSON *ranks = cJSON_GetObjectItem(pl, "ranks"), *rank = cJSON_GetObjectItem(pl, "rank");
	const cJSON *gpus = cJSON_GetObjectItem(pl, "gpus"), *nnodes = cJSON_GetObjectItem(pl, "nnodes");
	/* a row from before ranks were placed has no port: 0, which the
	 * engine refuses by name */
	const cJSON *dp = cJSON_GetObjectItem(pl, "dist_port");
	int dist_port = cJSON_IsNumber(dp) ? dp->valueint : 0;
	int per_node = cJSON_IsNumber(cJSON_GetObjectItem(pl, "ranks_per_node"))
			       ? cJSON_GetObjectItem(pl, "ranks_per_node")->valueint
			       : 1;
	int split = cJSON_IsArray(ranks) || cJSON_IsNumber(rank) || cJSON_GetArraySize(gpus) > 1 || per_node > 1;
	if (cJSON_IsArray(ranks)) {
		char host[256];
		ARG("--tp");
		ARG("%d", cJSON_IsArray(gpus) ? (int)cJSON_GetNumberValue(cJSON_GetObjectItem(pl, "tensor_parallel"))
					      : cJSON_GetArraySize(ranks) * per_node);
		if (cJSON_IsArray(gpus) || per_node > 1) {
			ARG("--nnodes");
			ARG("%d", cJSON_GetArraySize(ranks));
		}
		ARG("--node-rank");
		ARG("0");
		ARG("--dist-init");
		cut |= deploy_url_host(a->cfg.advertise_url, host, sizeof(host)) != APP_OK;
		ARG("%s:%d", host, dist_port);
	} else if (cJSON_IsNumber(rank)) {
		ARG("--tp");
		ARG("%d", (int)cJSON_GetNumberValue(cJSON_GetObjectItem(pl, "tp")));
		if (cJSON_IsNumber(nnodes)) {
			ARG("--nnodes");
			ARG("%d", nnodes->valueint);
		}
		ARG("--node-rank");
		ARG("%d", rank->valueint);
		ARG("--dist-init");
		ARG("%s", cJSON_GetStringValue(cJSON_GetObjectItem(pl, "dist_init")));
	} else if (per_node > 1) {
		/* this node's ranks alone (one a NUMA node), meeting on loopback */
		ARG("--tp");
		ARG("%d", per_node);
		ARG("--nnodes");
		ARG("1");
		ARG("--dist-init");
		ARG("127.0.0.1:%d", dist_port);
	}
	if ((v = cJSON_GetObjectItem(pl, "gpus")) != NULL && cJSON_IsArray(v)) {
		/* the GPUs by UUID, which stay the same across reboots and
		 * driver reloads where indexes may not (deploy/placement.h) */
		const cJSON *g;
		size_t len = 0;
		ARG("--device");
		ARG("cuda");
		ARG("--gpus");
		buf[k][0] = '\0';
		cJSON_ArrayForEach (g, v)
			if (cJSON_IsString(g))
				len += (size_t)snprintf(buf[k] + len, len < sizeof(buf[k]) ? sizeof(buf[k]) - len : 0,
							"%s%s", len ? "," : "", g->valuestring);
		cut |= len >= sizeof(buf[k]);
		argv[n++] = buf[k++];
		/* several on this node alone: one process a GPU (NCCL's way),
		 * which the engine starts itself and whose ranks meet on
		 * loopback */
		if (cJSON_GetArraySize(v) > 1 && !cJSON_IsArray(ranks) && !cJSON_IsNumber(rank)) {
			ARG("--tp");
			ARG("%d", cJSON_GetArraySize(v));
			ARG("--nnodes");
			ARG("1");
			ARG("--dist-init");
			ARG("127.0.0.1:%d", dist_port);
		}
	}
	static const char *const opt[][2] = { { "ctx", "--ctx" },
					      { "parallel", "--parallel" },
					      { "batch", "--batch" },
					      { "kv_cache_mib", "--kv-cache-mib" } };
	for (size_t i = 0; i < sizeof(opt) / sizeof(opt[0]); i++)
		if ((v = cJSON_GetObjectItem(op, opt[i][0])) != NULL && cJSON_IsNumber(v)) {
			ARG("%s", opt[i][1]);
			ARG("%d", v->valueint);
		}
	if ((v = cJSON_GetObjectItem(op, "chat_template")) != NULL && cJSON_IsString(v)) {
		ARG("--chat-template");
		ARG("%s", v->valuestring);
	}
	/* the base model's adapters, served by name; those registered
	 * while it runs are loaded through the engine from the directories
	 * models come from (deploy/lora_sync.c).  Adapters run on the CPU
	 * backend only: a GPU placement starts without them (a load then
	 * says why in served_by.failed) rather than not at all. */
	int on_gpu = cJSON_IsArray(cJSON_GetObjectItem(pl, "gpus"));
	/* nor a split one (the engine refuses adapters on a split model) */
	cJSON *loras = cJSON_Parse(w->loras != NULL && !on_gpu && !split ? w->loras : "[]");
	int n_lora = 0;
	cJSON_ArrayForEach (v, loras)
		if (cJSON_IsString(v) && n_lora++ < ADAPTERS_MAX) {
			ARG("--lora");
			ARG("%s", v->valuestring);
		}
	cJSON_Delete(loras);
	for (int i = 0; i < a->cfg.n_model_roots && !split; i++) { /* the model directory is one */
		ARG("--lora-dir");
		ARG("%s", a->cfg.model_roots[i]);
	}
#undef ARG
	argv[n] = NULL;
	cJSON_Delete(pl);
	cJSON_Delete(op);
	return cut ? APP_ERANGE : n;
}

/* A follower rank of a model split over nodes (a member runs it for the
 * leader) answers no HTTP: running is all it can be seen to do; rank 0
 * on the leader is ready only once every rank has joined. */
static int
follows(const char *placement)
{
	cJSON *pl = cJSON_Parse(placement);
	int f = cJSON_IsNumber(cJSON_GetObjectItem(pl, "rank"));

	cJSON_Delete(pl);
	return f;
}

static int
open_log(struct admin *a, int64_t id)
{
	char path[4200], old[4300];
	struct stat sb;

	if (deploy_file(a, id, "engine.log", path, sizeof(path)) != APP_OK) {
		errno = ENAMETOOLONG;
		return APP_ERANGE;
	}
	if (stat(path, &sb) == 0 && sb.st_size > LOG_ROTATE_BYTES && str_fmt(old, sizeof(old), "%s.1", path) == APP_OK)
		rename(path, old);
	return open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
}

static void last_log_line(struct admin *a, int64_t id, char *out, size_t size);

/* A fresh key for the admin's own calls to an engine: "adm_" + 32 characters. */
static void
new_key(char *key, size_t size)
{
	unsigned char raw[24];

	randombytes_buf(raw, sizeof(raw));
	memcpy(key, "adm_", 4);
	sodium_bin2base64(key + 4, size - 4, raw, sizeof(raw), sodium_base64_VARIANT_URLSAFE_NO_PADDING);
	sodium_memzero(raw, sizeof(raw));
}

/* A process record holds the admin's key on its engine: wiped, then freed. */
static void
proc_free(struct proc *p)
{
	sodium_memzero(p->key, sizeof(p->key));
	free(p);
}

static void keep_cpus(struct admin *a, int64_t id, const struct engine_cpus *cpus);

/* Whether placement holds CPUs of its own: threads > 0, not
 * oversubscribed (what api/deployments.c counts against a node's CPUs);
 * *threads is its thread count. */
static int
holds_cpus(const char *placement, int *threads)
{
	cJSON *pl = cJSON_Parse(placement);
	const cJSON *t = cJSON_GetObjectItem(pl, "threads");
	int own;

	const cJSON *per_node = cJSON_GetObjectItem(pl, "ranks_per_node");
	*threads = cJSON_IsNumber(t) && t->valueint > 0 ? t->valueint : 0;
	if (cJSON_IsNumber(per_node) && per_node->valueint > 1) /* the node's ranks' CPUs together */
		*threads *= per_node->valueint;
	own = *threads > 0 && !cJSON_IsTrue(cJSON_GetObjectItem(pl, "oversubscribe"));
	cJSON_Delete(pl);
	return own;
}

/* The CPUs w's engine is given: `threads` of its own, from one NUMA node
 * where it can, or else the CPUs no other engine holds (deploy/cpuset.h),
 * of the home node it is given where the host has several; the lowest
 * free ones when oversubscribed.  Empty (anywhere) if this process's own
 * affinity cannot be read. */
static void
choose_cpus(struct supervisor *s, const struct want *w, struct proc *self)
{
	cpu_set_t avail, held;
	int threads;

	self->dedicated = holds_cpus(w->placement, &threads);
	self->pooled = threads == 0;
	self->cpus.node = -1;
	CPU_ZERO(&self->cpus.set);
	if (sched_getaffinity(0, sizeof(avail), &avail) != 0)
		return;
	CPU_ZERO(&held);
	for (const struct proc *p = s->procs; p != NULL; p = p->next)
		if (p != self && p->pid > 0 && p->dedicated)
			CPU_OR(&held, &held, &p->cpus.set);
	if (threads > 0) {
		cpuset_pick(&avail, &held, threads, s->sysfs, &self->cpus.set, &self->cpus.node);
		return;
	}
	/* one shared engine a socket where there are several */
	int sharers[CPUSET_MAX_NODES] = { 0 };
	for (const struct proc *p = s->procs; p != NULL; p = p->next)
		if (p != self && p->pid > 0 && p->pooled && p->cpus.node >= 0 && p->cpus.node < CPUSET_MAX_NODES)
			sharers[p->cpus.node]++;
	self->cpus.node = cpuset_home_node(&avail, &held, sharers, s->sysfs);
	cpuset_shared_on(&avail, &held, self->cpus.node, s->sysfs, &self->cpus.set);
}

/* Every thread of process pid onto set; 0, or -1 when one could not be
 * moved (it may have ended meanwhile: the others still were). */
static int
set_process_affinity(pid_t pid, const cpu_set_t *set)
{
	char path[64];
	struct dirent *de;
	DIR *d;
	int rc = 0;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	if ((d = opendir(path)) == NULL)
		return -1;
	while ((de = readdir(d)) != NULL) {
		char *end;
		long tid = strtol(de->d_name, &end, 10);
		if (end != de->d_name && *end == '\0' && sched_setaffinity((pid_t)tid, sizeof(*set), set) != 0)
			rc = -1;
	}
	closedir(d);
	return rc;
}

/* The engines without CPUs of their own follow the pool (of their home
 * node, where the host has several): off the CPUs an engine with threads
 * took since they started, back onto those it gave up.  Their threads
 * are moved in place (no restart, so no request is lost); each engine
 * then runs as many threads as the pool has cores (it started with one
 * for every CPU here: --max-threads). */
static void
reshare(struct supervisor *s)
{
	cpu_set_t avail, held;

	if (sched_getaffinity(0, sizeof(avail), &avail) != 0)
		return;
	CPU_ZERO(&held);
	for (const struct proc *p = s->procs; p != NULL; p = p->next)
		if (p->pid > 0 && p->dedicated)
			CPU_OR(&held, &held, &p->cpus.set);
	for (struct proc *p = s->procs; p != NULL; p = p->next) {
		cpu_set_t pool;
		if (p->pid <= 0 || !p->pooled || CPU_COUNT(&p->cpus.set) == 0)
			continue;
		cpuset_shared_on(&avail, &held, p->cpus.node, s->sysfs, &pool);
		if (CPU_EQUAL(&p->cpus.set, &pool))
			continue;
		if (set_process_affinity(p->pid, &pool) == 0) {
			p->cpus.set = pool;
			keep_cpus(s->a, p->id, &p->cpus);
		}
	}
}

static int
spawn(struct supervisor *s, const struct want *w, struct proc *p, char *why, size_t why_size)
{
	char *argv[ENGINE_ARGC], buf[ENGINE_ARGC][4200], dir[4096], key[sizeof(p->key)];

	if (deploy_file(s->a, w->id, NULL, dir, sizeof(dir)) != APP_OK) {
		msg_fmt(why, why_size, "the deployment directory's path is longer than %zu bytes", sizeof(dir) - 1);
		return APP_ERANGE;
	}
	if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
		msg_fmt(why, why_size, "cannot create %s: %s", dir, strerror(errno));
		return APP_EIO;
	}
	if (access(w->model_path, R_OK) != 0) {
		msg_fmt(why, why_size, "the model file %s cannot be read: %s", w->model_path, strerror(errno));
		return APP_EIO;
	}
	new_key(key, sizeof(key));
	pthread_mutex_lock(&s->a->db_mu);
	int kerr = write_keys(s->a, w->id, key);
	pthread_mutex_unlock(&s->a->db_mu);
	if (kerr != 0) {
		msg_fmt(why, why_size, "cannot write %s/api-keys: %s", dir, strerror(errno));
		sodium_memzero(key, sizeof(key));
		return APP_EIO;
	}
	int log = open_log(s->a, w->id);
	if (log < 0) {
		msg_fmt(why, why_size, "cannot open %s/engine.log: %s", dir, strerror(errno));
		sodium_memzero(key, sizeof(key));
		return APP_EIO;
	}
	char path[4200], desc[200], err[APP_ERR_LEN];
	pid_t pid;
	if (build_argv(s, w, p, argv, buf) < 0 ||
	    deploy_file(s->a, w->id, "engine.log", path, sizeof(path)) != APP_OK) {
		msg_fmt(why, why_size, "an argument or a path of the engine's does not fit its buffer");
		sodium_memzero(key, sizeof(key));
		close(log);
		return APP_ERANGE;
	}
	snprintf(desc, sizeof(desc), "privai engine for deployment %s", w->name);
	struct stat before;
	if (fstat(log, &before) != 0)
		before.st_size = 0;
	choose_cpus(s, w, p);
	int rc = runner_start(s->runner, w->id, desc, argv, path, log, &p->cpus, &pid, err);
	close(log);
	if (rc != APP_OK) {
		/* an engine that ran and died at once says why in its log */
		char line[300] = "";
		struct stat after;
		if (stat(path, &after) == 0 && after.st_size > before.st_size)
			last_log_line(s->a, w->id, line, sizeof(line));
		msg_fmt(why, why_size, "%s%s%s", err, line[0] ? ": " : "", line);
		sodium_memzero(key, sizeof(key));
		return APP_EIO;
	}
	pthread_mutex_lock(&s->mu);
	memcpy(p->key, key, sizeof(key));
	sodium_memzero(key, sizeof(key));
	p->pid = pid;
	p->ready = 0;
	pthread_mutex_unlock(&s->mu);
	keep_cpus(s->a, w->id, &p->cpus);
	p->stop_sent_ms = 0;
	return 0;
}

/* The last non-empty line of the engine's log, for a failure reason. */
static void
last_log_line(struct admin *a, int64_t id, char *out, size_t size)
{
	char path[4200], buf[2048];

	out[0] = '\0';
	if (deploy_file(a, id, "engine.log", path, sizeof(path)) != APP_OK)
		return;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	off_t end = lseek(fd, 0, SEEK_END);
	off_t start = end > (off_t)sizeof(buf) - 1 ? end - (off_t)sizeof(buf) + 1 : 0;
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, start);
	close(fd);
	if (n <= 0)
		return;
	buf[n] = '\0';
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
		buf[--n] = '\0';
	const char *line = strrchr(buf, '\n');
	line = line != NULL ? line + 1 : buf;
	size_t len = strlen(line) < size - 1 ? strlen(line) : size - 1;
	memcpy(out, line, len);
	out[len] = '\0';
}

static int
healthy(int port)
{
	char url[64];
	long code = 0;
	CURL *c = curl_easy_init();

	if (c == NULL)
		return 0;
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/health", port);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 1000L);
	curl_easy_setopt(c, CURLOPT_NOBODY, 0L);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, fwrite);
	FILE *null = fopen("/dev/null", "w");
	curl_easy_setopt(c, CURLOPT_WRITEDATA, null);
	if (curl_easy_perform(c) == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	curl_easy_cleanup(c);
	if (null != NULL)
		fclose(null);
	return code == 200;
}

static int
load_wants(struct admin *a, struct want **ret)
{
	sqlite3_stmt *st;
	struct want *w = NULL;
	int n = 0, cap = 0;

	*ret = NULL;
	pthread_mutex_lock(&a->db_mu);
	if (sqlite3_prepare_v2(a->db,
			       "SELECT d.id, d.name, d.desired = 'running', d.state, m.path, m.state = 'ready', "
			       "d.port, d.placement, d.options, (SELECT json_group_array(name || '=' || path) FROM "
			       "(SELECT name, path FROM models l WHERE l.base_model_id = m.id AND l.kind = 'lora' "
			       "AND l.state = 'ready' ORDER BY l.id)) FROM deployments d JOIN models m ON "
			       "m.id = d.model_id WHERE d.node_id IS NULL",
			       -1, &st, NULL) != SQLITE_OK) {
		pthread_mutex_unlock(&a->db_mu);
		return APP_EIO;
	}
	while (sqlite3_step(st) == SQLITE_ROW) {
		if (n == cap) {
			struct want *nw = realloc(w, (size_t)(cap = cap ? cap * 2 : 8) * sizeof(*w));
			if (nw == NULL)
				break;
			w = nw;
		}
		struct want *x = &w[n++];
		memset(x, 0, sizeof(*x));
		x->id = sqlite3_column_int64(st, 0);
		snprintf(x->name, sizeof(x->name), "%s", (const char *)sqlite3_column_text(st, 1));
		x->run = sqlite3_column_int(st, 2);
		snprintf(x->state, sizeof(x->state), "%s", (const char *)sqlite3_column_text(st, 3));
		snprintf(x->model_path, sizeof(x->model_path), "%s", (const char *)sqlite3_column_text(st, 4));
		x->model_ready = sqlite3_column_int(st, 5);
		x->port = sqlite3_column_int(st, 6);
		x->placement = strdup((const char *)sqlite3_column_text(st, 7));
		x->options = strdup((const char *)sqlite3_column_text(st, 8));
		x->loras = strdup((const char *)sqlite3_column_text(st, 9));
	}
	sqlite3_finalize(st);
	pthread_mutex_unlock(&a->db_mu);
	*ret = w;
	return n;
}

static void
free_wants(struct want *w, int n)
{
	for (int i = 0; i < n; i++) {
		free(w[i].placement);
		free(w[i].options);
		free(w[i].loras);
	}
	free(w);
}

static struct proc *
proc_of(struct supervisor *s, int64_t id)
{
	for (struct proc *p = s->procs; p != NULL; p = p->next)
		if (p->id == id)
			return p;
	return NULL;
}

static const struct want *
want_of(const struct want *w, int n, int64_t id)
{
	for (int i = 0; i < n; i++)
		if (w[i].id == id)
			return &w[i];
	return NULL;
}

/* A child has exited: record why, and plan the restart. */
static void
reaped(struct supervisor *s, struct proc *p, int status, const char *how, const struct want *w, int64_t now)
{
	char line[300], reason[700], more[200];

	int stopping = p->stop_sent_ms != 0 || w == NULL || !w->run;
	pthread_mutex_lock(&s->mu);
	p->pid = 0;
	p->ready = 0;
	pthread_mutex_unlock(&s->mu);
	p->stop_sent_ms = 0;
	if (w == NULL)
		return;
	if (stopping) {
		set_row(s, p->id, "stopped", NULL, 0, 0);
		return;
	}
	last_log_line(s->a, p->id, line, sizeof(line));
	p->fails++;
	int64_t delay = (int64_t)1000 << (p->fails - 1 < 6 ? p->fails - 1 : 6);
	if (delay > BACKOFF_MAX_MS)
		delay = BACKOFF_MAX_MS;
	p->backoff_until_ms = now + delay;
	msg_fmt(more, sizeof(more), "%s%s%s", how[0] ? " (" : "", how, how[0] ? ")" : "");
	if (WIFEXITED(status))
		snprintf(reason, sizeof(reason), "the engine exited with status %d%s%s%s; restarting in %lld s",
			 WEXITSTATUS(status), more, line[0] ? ": " : "", line, (long long)(delay / 1000));
	else
		snprintf(reason, sizeof(reason), "the engine was killed by signal %d%s%s%s; restarting in %lld s",
			 WTERMSIG(status), more, line[0] ? ": " : "", line, (long long)(delay / 1000));
	set_row(s, p->id, "failed", reason, 0, 1);
}

static void
reconcile(struct supervisor *s)
{
	struct want *w;
	int n = load_wants(s->a, &w), status;
	int64_t now = admin_mono_ms();
	char why[600], how[200], err[APP_ERR_LEN];

	if (n < 0)
		return;
	/* children that exited, and engines to stop */
	for (struct proc **pp = &s->procs; *pp != NULL;) {
		struct proc *p = *pp;
		const struct want *x = want_of(w, n, p->id);
		if (p->pid > 0 && runner_wait(s->runner, p->id, p->pid, &status, how, sizeof(how), err) == 0)
			reaped(s, p, status, how, x, now);
		if (p->pid > 0 && p->stop_sent_ms == 0 && atomic_exchange(&p->restart, 0)) {
			/* reaped as stopped, started again next tick */
			runner_signal(s->runner, p->id, p->pid, SIGTERM, err);
			p->stop_sent_ms = now;
		}
		if (p->pid > 0 && (x == NULL || !x->run)) {
			if (p->stop_sent_ms == 0) {
				runner_signal(s->runner, p->id, p->pid, SIGTERM, err);
				p->stop_sent_ms = now;
				if (x != NULL)
					set_row(s, p->id, "stopping", NULL, p->pid, 0);
			} else if (now - p->stop_sent_ms > STOP_GRACE_MS) {
				runner_signal(s->runner, p->id, p->pid, SIGKILL, err);
			}
		}
		if (p->pid == 0 && x == NULL) { /* the row is gone and so is the engine */
			pthread_mutex_lock(&s->mu);
			*pp = p->next;
			pthread_mutex_unlock(&s->mu);
			proc_free(p);
			continue;
		}
		pp = &p->next;
	}
	/* engines to start, and loading ones to look at */
	for (int i = 0; i < n; i++) {
		struct proc *p = proc_of(s, w[i].id);
		if (!w[i].run) {
			if ((p == NULL || p->pid == 0) && strcmp(w[i].state, "stopped") != 0)
				set_row(s, w[i].id, "stopped", NULL, 0, 0);
			continue;
		}
		if (p == NULL) {
			if ((p = calloc(1, sizeof(*p))) == NULL)
				continue;
			p->id = w[i].id;
			p->port = w[i].port;
			pthread_mutex_lock(&s->mu);
			p->next = s->procs;
			s->procs = p;
			pthread_mutex_unlock(&s->mu);
		}
		if (p->pid == 0 && now >= p->backoff_until_ms) {
			if (!w[i].model_ready) {
				if (strcmp(w[i].state, "pending") != 0)
					set_row(s, w[i].id, "pending", "waiting for the model to finish importing", 0,
						0);
			} else if (spawn(s, &w[i], p, why, sizeof(why)) == 0) {
				set_row(s, w[i].id, "loading", NULL, p->pid, 0);
			} else {
				p->fails++;
				p->backoff_until_ms = now + BACKOFF_MAX_MS;
				set_row(s, w[i].id, "failed", why, 0, 0);
			}
		} else if (p->pid > 0 && !p->ready && (follows(w[i].placement) || healthy(p->port))) {
			pthread_mutex_lock(&s->mu);
			p->ready = 1;
			pthread_mutex_unlock(&s->mu);
			p->fails = 0;
			set_row(s, w[i].id, "ready", follows(w[i].placement) ? "follows rank 0" : NULL, p->pid, 0);
		} else if (p->pid > 0 && p->stop_sent_ms == 0 && strcmp(w[i].state, "stopping") == 0) {
			/* stopped and started again between two ticks: the
			 * engine was never asked to stop */
			keep_running(s, w[i].id, p->ready ? "ready" : "loading");
		}
	}
	free_wants(w, n);
	reshare(s);
}

static void *
supervisor_main(void *arg)
{
	struct supervisor *s = arg;

	pthread_mutex_lock(&s->mu);
	while (!s->stop) {
		pthread_mutex_unlock(&s->mu);
		reconcile(s);
		pthread_mutex_lock(&s->mu);
		if (s->stop)
			break;
		if (!s->kicked) {
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += TICK_MS * 1000000L;
			ts.tv_sec += ts.tv_nsec / 1000000000L;
			ts.tv_nsec %= 1000000000L;
			pthread_cond_timedwait(&s->cv, &s->mu, &ts);
		}
		s->kicked = 0;
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

/* Units are named after this admin's state directory, so two admins on
 * one host (a test, a migration) never stop each other's engines. */
static int
open_runner(struct admin *a, struct supervisor *s, char *err)
{
	unsigned char h[crypto_hash_sha256_BYTES];
	char real[PATH_MAX], tag[9];

	if (realpath(a->cfg.state_dir, real) == NULL)
		snprintf(real, sizeof(real), "%s", a->cfg.state_dir);
	crypto_hash_sha256(h, (const unsigned char *)real, strlen(real));
	sodium_bin2hex(tag, sizeof(tag), h, 4);
	int rc = runner_open((enum runner_mode)a->cfg.engine_runner, tag, &s->runner, a->runner_note,
			     sizeof(a->runner_note), err);
	if (rc == APP_OK)
		snprintf(a->runner_how, sizeof(a->runner_how), "%s", runner_describe(s->runner));
	return rc;
}

/* An adopted engine started when its process did, not now. */
static void
keep_started_at(struct admin *a, int64_t id, int64_t at)
{
	sqlite3_stmt *st;
	char err[APP_ERR_LEN];

	if (at <= 0)
		return;
	pthread_mutex_lock(&a->db_mu);
	if (db_prepare(a->db, "UPDATE deployments SET started_at = ?1 WHERE id = ?2", &st, NULL) == APP_OK) {
		sqlite3_bind_int64(st, 1, at);
		sqlite3_bind_int64(st, 2, id);
	}
	if (db_write(a->db, st, err) != APP_OK)
		log_warn("deployment %lld: start time not kept: %s", (long long)id, err);
	pthread_mutex_unlock(&a->db_mu);
}

/* Where the engine of deployment id runs, for the API. */
static void
keep_cpus(struct admin *a, int64_t id, const struct engine_cpus *cpus)
{
	sqlite3_stmt *st;
	char err[APP_ERR_LEN], list[512];

	cpuset_format(&cpus->set, list, sizeof(list));
	pthread_mutex_lock(&a->db_mu);
	if (db_prepare(a->db, "UPDATE deployments SET cpus = ?1 WHERE id = ?2", &st, NULL) == APP_OK) {
		sqlite3_bind_text(st, 1, list[0] ? list : NULL, -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(st, 2, id);
	}
	if (db_write(a->db, st, err) != APP_OK)
		log_warn("deployment %lld: its CPUs not kept: %s", (long long)id, err);
	pthread_mutex_unlock(&a->db_mu);
}

/* Engines a previous run left running under systemd that still run what
 * this run would start are kept, with a fresh admin key; the others are
 * stopped before anything starts.  A note for the log in a->adopt_note. */
static void
adopt(struct supervisor *s)
{
	char *argv[ENGINE_ARGC], buf[ENGINE_ARGC][4200], why[300], names[400] = "";
	struct want *w;
	int n = load_wants(s->a, &w), kept = 0, replaced = 0;

	for (int i = 0; i < n; i++) {
		struct proc *p;
		pid_t pid;
		if (!w[i].run || !w[i].model_ready)
			continue;
		struct proc probe = { .port = w[i].port };
		build_argv(s, &w[i], &probe, argv, buf);
		if (runner_adopt(s->runner, w[i].id, argv, &pid, why, sizeof(why)) != 1) {
			replaced += why[0] != '\0';
			continue;
		}
		if ((p = calloc(1, sizeof(*p))) == NULL)
			break;
		p->id = w[i].id;
		p->port = w[i].port;
		p->pid = pid;
		/* the CPUs it was given by the run that started it */
		int threads;
		p->dedicated = holds_cpus(w[i].placement, &threads);
		p->pooled = threads == 0;
		p->cpus.node = -1;
		if (sched_getaffinity(pid, sizeof(p->cpus.set), &p->cpus.set) != 0)
			CPU_ZERO(&p->cpus.set);
		else if (p->pooled) /* its home, where the run that started it gave it one */
			p->cpus.node = cpuset_node_of(&p->cpus.set, s->sysfs);
		new_key(p->key, sizeof(p->key));
		pthread_mutex_lock(&s->a->db_mu);
		int kerr = write_keys(s->a, p->id, p->key);
		pthread_mutex_unlock(&s->a->db_mu);
		if (kerr == 0)
			kill(pid, SIGHUP); /* it rereads its key file: the old admin key is gone */
		p->next = s->procs;
		s->procs = p;
		set_row(s, p->id, "loading", NULL, pid, 0);
		keep_started_at(s->a, p->id, runner_started_at(pid));
		keep_cpus(s->a, p->id, &p->cpus);
		snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s", kept ? ", " : "", w[i].name);
		kept++;
	}
	free_wants(w, n);
	if (kept > 0 || replaced > 0)
		snprintf(s->a->adopt_note, sizeof(s->a->adopt_note),
			 "kept %d engine(s) a previous run left serving%s%s%s; replaced %d that ran other settings or "
			 "binaries",
			 kept, kept ? " (" : "", names, kept ? ")" : "", replaced);
	runner_stop_leftovers(s->runner);
}

int
supervisor_start(struct admin *a, struct supervisor **ret, char *err)
{
	struct supervisor *s = calloc(1, sizeof(*s));
	char dir[4096];
	int rc;

	if (s == NULL)
		return app_fail(err, APP_ENOMEM, "out of memory");
	if (str_fmt(dir, sizeof(dir), "%s/deployments", a->cfg.state_dir) != APP_OK) {
		free(s);
		return app_fail(err, APP_ERANGE, "the state directory's path is too long: %s", a->cfg.state_dir);
	}
	if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
		free(s);
		return app_fail(err, APP_EIO, "cannot create %s: %s", dir, strerror(errno));
	}
	if (hostfs_path(a->cfg.sys_root, "/sys", s->sysfs, sizeof(s->sysfs)) != APP_OK) {
		free(s);
		return app_fail(err, APP_ERANGE, "--sys-root %s is too long", a->cfg.sys_root);
	}
	if ((rc = open_runner(a, s, err)) != APP_OK) {
		free(s);
		return rc;
	}
	s->a = a;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	/* whatever a previous run recorded, nothing runs yet */
	pthread_mutex_lock(&a->db_mu);
	rc = db_exec(a->db,
		     "UPDATE deployments SET state = CASE desired WHEN 'running' THEN 'pending' ELSE 'stopped' "
		     "END, pid = NULL, unit = NULL, reason = NULL WHERE node_id IS NULL",
		     err);
	pthread_mutex_unlock(&a->db_mu);
	if (rc != APP_OK) {
		runner_close(s->runner);
		free(s);
		return rc;
	}
	adopt(s);
	atomic_store(&s->alive, 1);
	if (pthread_create(&s->thread, NULL, supervisor_main, s) != 0) {
		runner_close(s->runner);
		while (s->procs != NULL) { /* adopted units go on serving */
			struct proc *next = s->procs->next;
			proc_free(s->procs);
			s->procs = next;
		}
		free(s);
		return app_fail(err, APP_EIO, "cannot start the supervisor thread");
	}
	*ret = s;
	return APP_OK;
}

void
supervisor_stop(struct supervisor *s)
{
	char how[200], err[APP_ERR_LEN];
	int status;

	if (s == NULL)
		return;
	pthread_mutex_lock(&s->mu);
	s->stop = 1;
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mu);
	pthread_join(s->thread, NULL);
	atomic_store(&s->alive, 0);
	/* units go on serving; the next run adopts them */
	for (struct proc *p = s->procs; p != NULL && !runner_outlives(s->runner); p = p->next)
		if (p->pid > 0)
			runner_signal(s->runner, p->id, p->pid, SIGTERM, err);
	int64_t deadline = admin_mono_ms() + 10000;
	for (struct proc *p = s->procs; p != NULL && !runner_outlives(s->runner); p = p->next) {
		while (p->pid > 0 && runner_wait(s->runner, p->id, p->pid, &status, how, sizeof(how), err) == 1) {
			if (admin_mono_ms() > deadline)
				runner_signal(s->runner, p->id, p->pid, SIGKILL, err);
			usleep(20000);
		}
	}
	runner_close(s->runner);
	while (s->procs != NULL) {
		struct proc *next = s->procs->next;
		proc_free(s->procs);
		s->procs = next;
	}
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	free(s);
}

int
supervisor_alive(struct supervisor *s)
{
	return atomic_load(&s->alive);
}

void
supervisor_kick(struct supervisor *s)
{
	pthread_mutex_lock(&s->mu);
	s->kicked = 1;
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

int
supervisor_endpoint(struct supervisor *s, int64_t id, int *port, char *key, size_t key_size)
{
	int rc = APP_EUNAVAIL;

	pthread_mutex_lock(&s->mu);
	struct proc *p = proc_of(s, id);
	if (p != NULL && p->pid > 0 && p->ready) {
		*port = p->port;
		snprintf(key, key_size, "%s", p->key);
		rc = 0;
	}
	pthread_mutex_unlock(&s->mu);
	return rc;
}

void
supervisor_restart(struct supervisor *s, int64_t id)
{
	pthread_mutex_lock(&s->mu);
	struct proc *p = proc_of(s, id);
	if (p != NULL)
		atomic_store(&p->restart, 1);
	pthread_cond_signal(&s->cv);
	s->kicked = 1;
	pthread_mutex_unlock(&s->mu);
}

int
supervisor_keys_changed(struct supervisor *s, int64_t id)
{
	char key[sizeof(((struct proc *)0)->key)];
	pid_t pid = 0;

	pthread_mutex_lock(&s->mu);
	struct proc *p = proc_of(s, id);
	if (p != NULL && p->pid > 0) {
		pid = p->pid;
		memcpy(key, p->key, sizeof(key));
	}
	pthread_mutex_unlock(&s->mu);
	if (pid == 0) /* written afresh when it starts */
		return 0;
	int rc = write_keys(s->a, id, key);
	sodium_memzero(key, sizeof(key));
	if (rc != 0)
		return APP_EIO;
	kill(pid, SIGHUP);
	return 0;
}
