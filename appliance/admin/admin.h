/*
 * The privai-admin daemon's shared state: configuration, the store and
 * its mutex, the HTTP daemon, the deployment supervisor, counters for
 * /metrics.
 */
#ifndef PRIVAI_ADMIN_ADMIN_H
#define PRIVAI_ADMIN_ADMIN_H

#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdint.h>

#include "ratelimit.h"

#define ADMIN_MAX_MODEL_ROOTS 8
/* The state directory's longest path: every path under it (the store,
 * models, backups, TLS, deployments) then fits its buffer, and each is
 * still built with str_fmt, which fails rather than cut. */
#define ADMIN_STATE_DIR_MAX 1024

struct admin_config {
	const char *state_dir; /* database, model files, deployment logs */
	const char *host;      /* IPv4 address to listen on */
	int port;
	int dev;                                        /* plain HTTP allowed (loopback only) */
	const char *tls_cert, *tls_key;                 /* PEM files; NULL in dev mode */
	const char *engine_bin;                         /* privai-engine used for deployments */
	const char *model_roots[ADMIN_MAX_MODEL_ROOTS]; /* directories models may be registered from */
	int n_model_roots;
	int64_t max_upload_bytes;
	int login_per_minute;               /* login attempts per client address */
	int engine_port_lo, engine_port_hi; /* loopback ports for engines */
	const char *sys_root;               /* where /proc and /sys are read ("/"; a fixture tree in tests) */
	const char *preflight_file;         /* privai-tune's last report (/run/privai/preflight.json) */
	const char *fabric_socket;          /* privai-fabric's status socket (/run/privai/fabric.sock) */
	const char *libvirt_uri;   /* where workload VMs are defined (qemu:///system; test:///default in tests) */
	const char *vm_dir;        /* their serial consoles and NoCloud seeds (/var/lib/privai-vms) */
	const char *vm_image_dir;  /* the only place their disks and seeds may come from (/var/lib/libvirt/images) */
	const char *node_name;     /* this node's name in the cluster (default: host name) */
	const char *advertise_url; /* how other nodes reach this console (default: from host and port) */
	const char *join_url;      /* the console to join at first start, or NULL */
	const char *join_token;    /* the one-time join token for it */
	const char *join_pin;      /* sha256//BASE64 of its TLS public key, or NULL */
	int heartbeat_s;           /* seconds between heartbeats; a node silent for 3 is unreachable */
	const char *webui_dir;     /* the console's static files */
	int engine_runner;         /* enum runner_mode: how engines run (deploy/runner.h) */
	int metrics_interval_s;    /* between samples of the metrics history */
	int metrics_keep_hours;    /* how long samples are kept */
	int engine_retry_s;        /* between asking the engine for its features again, while it fails */
};

struct supervisor;
struct fetch;
struct cluster;
struct MHD_Daemon;
struct route;
struct req;

/*
 * The daemon's state, by who may touch it:
 *
 *   set at start, read-only after   cfg, paths, routes, ports, TLS pin,
 *                                   relay key, the engine's features
 *   db_mu                           the store (db) and member_errors,
 *                                   uploads_busy; handlers run under it
 *                                   unless their route is ROUTE_UNLOCKED
 *   fetch_mu                        the list of downloads
 *   atomics                         the counters /metrics reads
 *   their own locks                 the supervisor, cluster, hasher and
 *                                   backup threads, login_limit
 */
struct admin {
	/* set at start, read-only after */
	struct admin_config cfg;
	char db_path[4096 + 16];
	char models_dir[4096 + 16];        /* where uploads and downloads land */
	const struct route *const *routes; /* what the daemon matches (api/routes.h), set before httpd_start */
	int (*fallback)(struct req *r);    /* a GET no route has: the console's files (webui_serve); 1 if it replied */
	int listen_fd;                     /* claimed at start (httpd_listen), the daemon's once it runs; -1 */
	char *tls_cert_pem;                /* the key's PEM is wiped as soon as GnuTLS holds it */
	int port;
	int tls;
	int64_t started_at;
	int64_t self_node_id;      /* this node's row in nodes */
	char tls_dir[4096];        /* STATE/tls when the admin manages the pair (no --tls-cert), else "" */
	char tls_pin[128];         /* sha256//BASE64 of our TLS public key; "" in dev mode */
	char runner_how[80];       /* how engines run: "child processes", "transient units of ..." */
	char runner_note[600];     /* why auto mode fell back to child processes, or "" */
	char adopt_note[600];      /* engines kept or replaced from a previous run, or "" */
	char relay_key[64];        /* what this node relays to other nodes' engines with (cluster/remote.h) */
	char relay_key_sha256[65]; /* hex; sent to the nodes in heartbeat answers */
	/* the engine's features, probed at start and, while that failed, again
	 * every engine_retry_s (deploy/engine_probe.h); replaced whole, never
	 * freed while the admin runs, so a reader needs no lock */
	_Atomic(struct cJSON *) engine;
	struct engine_watch *engine_watch;

	/* the store, and what is kept beside it: under db_mu */
	sqlite3 *db;
	pthread_mutex_t db_mu;
	struct cJSON *member_errors; /* leader specs this member could not take, for its next heartbeat */
	int64_t uploads_busy[16];    /* resumable uploads a request is writing now (api/uploads.c), 0: free */

	/* model downloads: under fetch_mu */
	pthread_mutex_t fetch_mu;
	struct fetch *fetches; /* models/download.c */

	/* counters for /metrics: atomic */
	atomic_long http_requests[6]; /* by status class: 1xx..5xx, index 0 unused */
	atomic_long logins_ok, logins_failed;
	atomic_long proxy_ok, proxy_failed; /* requests passed to an engine: answered, or 502 */
	atomic_long proxy_streams;          /* answers being relayed now (api/forward.c) */

	/* MIG changes this node made (gpu/mig_apply.c), counted so that a
	 * report of its GPUs read before one is not stored over what the
	 * change read back (cluster/nodes.h) */
	atomic_uint_least64_t gpu_epoch;

	/* threads and parts with locks of their own */
	struct MHD_Daemon *daemon;
	struct ratelimit login_limit;
	struct supervisor *sup;
	struct cluster *cluster;           /* heartbeats and the unreachable watch (cluster/cluster.c) */
	struct backup_sched *backup_sched; /* scheduled backups (backup/schedule.c) */
	struct hasher *hasher;             /* SHA-256 of models registered by path (models/hash.c) */
	struct metrics *metrics;           /* the metrics history's sampler (metrics/sampler.c) */
};

/* An audit row (store/audit.h) for something with nobody waiting on the
 * result: what the daemon did by itself, or a request's change already
 * made.  A row that cannot be written is logged as an error, the one
 * place left to say so. */
void admin_audit(sqlite3 *db, int64_t at, const char *actor, const char *action, const char *target, const char *addr,
		 const char *result, const char *detail);

/* Now, in Unix seconds (UTC). */
int64_t admin_now(void);
/* A monotonic clock in milliseconds, for deadlines and intervals. */
int64_t admin_mono_ms(void);

#endif
