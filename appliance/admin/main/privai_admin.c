/*
 * privai-admin: the appliance's control plane.  Options come from the
 * command line, else PRIVAI_* environment variables, else a KEY=VALUE
 * config file (--config, PRIVAI_CONFIG), else defaults.
 */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <netinet/in.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "status.h"
#include "strfmt.h"
#include "admin.h"
#include "log.h"
#include "auth/auth.h"
#include "cluster/cluster.h"
#include "gpu/mig_apply.h"
#include "cluster/nodes.h"
#include "store/db.h"
#include "store/tasks.h"
#include "deploy/engine_probe.h"
#include "api/deployments.h"
#include "api/routes.h"
#include "http/httpd.h"
#include "backup/backups.h"
#include "models/models.h"
#include "api/uploads.h"
#include "auth/reset_password.h"
#include "seed.h"
#include "deploy/supervisor.h"
#include "deploy/runner.h"
#include "metrics/sampler.h"
#include "http/tls.h"
#include "http/tls_live.h"

static void
usage(FILE *fp)
{
	fputs("usage: privai-admin [options]\n"
	      "  --state-dir DIR      database, models, logs (PRIVAI_STATE_DIR; default /var/lib/privai)\n"
	      "  --host ADDR          IPv4 address to listen on (PRIVAI_ADMIN_HOST; default 127.0.0.1)\n"
	      "  --port N             port (PRIVAI_ADMIN_PORT; default 8443, 8080 with --dev; 0: any)\n"
	      "  --dev                plain HTTP, allowed on a loopback address only (PRIVAI_DEV=1)\n"
	      "  --tls-cert FILE      PEM certificate (PRIVAI_TLS_CERT; default: generated self-signed\n"
	      "  --tls-key FILE       and key (PRIVAI_TLS_KEY)       under STATE/tls on first start)\n"
	      "  --engine PATH        privai-engine for deployments (PRIVAI_ENGINE; default: beside this binary)\n"
	      "  --model-root DIR     a directory models may be registered from; repeatable\n"
	      "                       (PRIVAI_MODEL_ROOTS, colon-separated; STATE/models always)\n"
	      "  --engine-runner MODE how engines run (PRIVAI_ENGINE_RUNNER): auto (default: transient\n"
	      "                       systemd units when booted with systemd, else child processes),\n"
	      "                       systemd, systemd-user or child\n"
	      "  --engine-ports LO-HI loopback ports for engines (PRIVAI_ENGINE_PORTS; default 18100-18999)\n"
	      "  --max-upload-gib N   largest model upload or download (PRIVAI_MAX_UPLOAD_GIB; default 512)\n"
	      "  --login-rate N       login attempts per minute per client address (PRIVAI_LOGIN_RATE; 10)\n"
	      "  --demo-model PATH    on first start, register PATH as 'demo' and deploy it on CPU\n"
	      "  --day0-models LIST   at each start, register each .gguf path of the comma-separated LIST\n"
	      "                       that no model has yet (PRIVAI_DAY0_MODELS; privai-firstboot sets it)\n"
	      "                       (PRIVAI_DEMO_MODEL)\n"
	      "  --node-name NAME     this node's name in the cluster (PRIVAI_NODE_NAME; default: host name)\n"
	      "  --advertise-url URL  how other nodes reach this console (PRIVAI_ADVERTISE_URL;\n"
	      "                       default: from --host and the port)\n"
	      "  --join URL           at first start, join the console at URL (PRIVAI_JOIN_URL) with the\n"
	      "                       one-time token in PRIVAI_JOIN_TOKEN or the file --join-token-file names\n"
	      "  --join-pin PIN       sha256//BASE64 of that console's TLS key, as its join token showed\n"
	      "                       (PRIVAI_JOIN_PIN); without it the certificate must verify\n"
	      "  --heartbeat-s N      seconds between heartbeats (PRIVAI_HEARTBEAT_S; default 10)\n"
	      "  --metrics-interval-s N  seconds between samples of the metrics history\n"
	      "                       (PRIVAI_METRICS_INTERVAL_S; default 60)\n"
	      "  --engine-retry-s N   while the engine cannot say what it runs on, ask it again\n"
	      "                       every N seconds (PRIVAI_ENGINE_RETRY_S; default 30)\n"
	      "  --metrics-keep-hours N  hours of metrics history kept (PRIVAI_METRICS_KEEP_HOURS;\n"
	      "                       default 48, at least 24)\n"
	      "  --sys-root DIR       read /proc and /sys under DIR (PRIVAI_SYS_ROOT; default /)\n"
	      "  --preflight-file F   privai-tune's last preflight report, shown in the console\n"
	      "                       (PRIVAI_PREFLIGHT_FILE; default /run/privai/preflight.json)\n"
	      "  --fabric-socket S    privai-fabric's status socket (PRIVAI_FABRIC_SOCKET;\n"
	      "                       default /run/privai/fabric.sock)\n"
	      "  --libvirt-uri URI    where workload VMs are defined (PRIVAI_LIBVIRT_URI;\n"
	      "                       default qemu:///system)\n"
	      "  --vm-dir DIR         workload VMs' serial consoles and NoCloud seeds (PRIVAI_VM_DIR;\n"
	      "                       default /var/lib/privai-vms)\n"
	      "  --vm-image-dir DIR   where workload VMs' disk images must be (PRIVAI_VM_IMAGE_DIR;\n"
	      "                       default /var/lib/libvirt/images)\n"
	      "  --webui DIR          the console's files (PRIVAI_WEBUI; default: webui/ beside the binary's\n"
	      "                       directory, then /usr/share/privai/webui)\n"
	      "  --config FILE        KEY=VALUE lines with the PRIVAI_* names above (PRIVAI_CONFIG)\n"
	      "  reset-password USER [--state-dir DIR]\n"
	      "                       root only, on the appliance: a new one-time password for USER,\n"
	      "                       printed here; its sessions end, its tokens are revoked, audited\n"
	      "  --list-routes        print every REST route with its minimum role, and exit; with\n"
	      "                       --json, one JSON object a line with its flags and audit action\n",
	      fp);
}

/* Settings not given in the environment are taken from the config file. */
static int
load_config(const char *path)
{
	char line[4096];
	int n = 0;
	FILE *fp = fopen(path, "r");

	if (fp == NULL) {
		fprintf(stderr, "privai-admin: --config %s: %s\n", path, strerror(errno));
		return APP_EIO;
	}
	while (fgets(line, sizeof(line), fp) != NULL) {
		n++;
		line[strcspn(line, "\r\n")] = '\0';
		char *p = line + strspn(line, " \t");
		if (*p == '#' || *p == '\0')
			continue;
		char *eq = strchr(p, '=');
		if (eq == NULL || strncmp(p, "PRIVAI_", 7) != 0) {
			fprintf(stderr, "privai-admin: %s:%d: expected PRIVAI_NAME=VALUE\n", path, n);
			fclose(fp);
			return APP_EINVAL;
		}
		*eq = '\0';
		setenv(p, eq + 1, 0); /* the environment wins */
	}
	fclose(fp);
	return 0;
}

static const char *
env(const char *name, const char *def)
{
	const char *v = getenv(name);

	return v != NULL && *v != '\0' ? v : def;
}

static int
parse_int(const char *opt, const char *s, long lo, long hi, long *out)
{
	char *end;
	long v = strtol(s, &end, 10);

	if (*end != '\0' || end == s || v < lo || v > hi) {
		fprintf(stderr, "privai-admin: %s must be an integer in %ld..%ld, not '%s'\n", opt, lo, hi, s);
		return APP_EINVAL;
	}
	*out = v;
	return 0;
}

struct options {
	struct admin_config cfg;
	const char *ports, *runner, *port, *max_gib, *demo_model, *roots, *login_rate, *heartbeat, *join_token_file,
		*metrics_every, *metrics_keep, *engine_retry;
	const char *day0_models;
	int list_routes, json;
	char engine_default[PATH_MAX + 16];
	char webui_default[PATH_MAX + 16];
	char join_token[128];
	char roots_buf[4096]; /* PRIVAI_MODEL_ROOTS, split in place */
};

/* The join options go together; the token may come from a file. */
static int
check_cluster_options(struct options *o)
{
	struct admin_config *c = &o->cfg;

	if (o->join_token_file != NULL) {
		FILE *fp = fopen(o->join_token_file, "r");
		if (fp == NULL || fgets(o->join_token, sizeof(o->join_token), fp) == NULL) {
			fprintf(stderr, "privai-admin: --join-token-file %s: cannot read it\n", o->join_token_file);
			if (fp != NULL)
				fclose(fp);
			return APP_EINVAL;
		}
		fclose(fp);
		o->join_token[strcspn(o->join_token, "\r\n")] = '\0';
		c->join_token = o->join_token;
	}
	if (c->join_url != NULL && (c->join_token == NULL || strncmp(c->join_token, "join_", 5) != 0)) {
		fprintf(stderr, "privai-admin: --join needs the one-time join token (join_...) in PRIVAI_JOIN_TOKEN or "
				"--join-token-file\n");
		return APP_EINVAL;
	}
	if (c->join_url != NULL && strncmp(c->join_url, "http://", 7) != 0 &&
	    strncmp(c->join_url, "https://", 8) != 0) {
		fprintf(stderr, "privai-admin: --join takes the console's URL, http:// or https://, not '%s'\n",
			c->join_url);
		return APP_EINVAL;
	}
	if (c->join_pin != NULL && strncmp(c->join_pin, "sha256//", 8) != 0) {
		fprintf(stderr, "privai-admin: --join-pin is sha256//BASE64, as the join token showed it\n");
		return APP_EINVAL;
	}
	if (c->node_name == NULL) {
		static char host[256];
		if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0')
			snprintf(host, sizeof(host), "privai");
		c->node_name = host;
	}
	return 0;
}

/* Every setting from its PRIVAI_* variable or its default; options
 * given on the command line replace them after. */
static void
env_defaults(struct options *o)
{
	struct admin_config *c = &o->cfg;

	memset(o, 0, sizeof(*o));
	c->state_dir = env("PRIVAI_STATE_DIR", "/var/lib/privai");
	c->host = env("PRIVAI_ADMIN_HOST", "127.0.0.1");
	c->dev = strcmp(env("PRIVAI_DEV", "0"), "1") == 0;
	c->tls_cert = env("PRIVAI_TLS_CERT", NULL);
	c->tls_key = env("PRIVAI_TLS_KEY", NULL);
	c->engine_bin = env("PRIVAI_ENGINE", NULL);
	o->roots = env("PRIVAI_MODEL_ROOTS", NULL);
	o->port = env("PRIVAI_ADMIN_PORT", NULL);
	o->ports = env("PRIVAI_ENGINE_PORTS", "18100-18999");
	o->runner = env("PRIVAI_ENGINE_RUNNER", "auto");
	o->max_gib = env("PRIVAI_MAX_UPLOAD_GIB", "512");
	o->demo_model = env("PRIVAI_DEMO_MODEL", NULL);
	o->day0_models = env("PRIVAI_DAY0_MODELS", NULL);
	o->login_rate = env("PRIVAI_LOGIN_RATE", "10");
	o->heartbeat = env("PRIVAI_HEARTBEAT_S", "10");
	o->metrics_every = env("PRIVAI_METRICS_INTERVAL_S", "60");
	o->metrics_keep = env("PRIVAI_METRICS_KEEP_HOURS", "48");
	o->engine_retry = env("PRIVAI_ENGINE_RETRY_S", "30");
	o->join_token_file = env("PRIVAI_JOIN_TOKEN_FILE", NULL);
	c->sys_root = env("PRIVAI_SYS_ROOT", "/");
	c->preflight_file = env("PRIVAI_PREFLIGHT_FILE", "/run/privai/preflight.json");
	c->fabric_socket = env("PRIVAI_FABRIC_SOCKET", "/run/privai/fabric.sock");
	c->libvirt_uri = env("PRIVAI_LIBVIRT_URI", "qemu:///system");
	c->vm_dir = env("PRIVAI_VM_DIR", "/var/lib/privai-vms");
	c->vm_image_dir = env("PRIVAI_VM_IMAGE_DIR", "/var/lib/libvirt/images");
	c->node_name = env("PRIVAI_NODE_NAME", NULL);
	c->advertise_url = env("PRIVAI_ADVERTISE_URL", NULL);
	c->join_url = env("PRIVAI_JOIN_URL", NULL);
	c->join_token = env("PRIVAI_JOIN_TOKEN", NULL);
	c->join_pin = env("PRIVAI_JOIN_PIN", NULL);
	c->webui_dir = env("PRIVAI_WEBUI", NULL);
}

/* The command line over the defaults.  APP_OK, or APP_EINVAL after
 * saying which option is wrong. */
static int
read_options(int argc, char **argv, struct options *o)
{
	struct admin_config *c = &o->cfg;
	/* options that take a value and only store it */
	const struct {
		const char *name;
		const char **slot;
	} valued[] = {
		{ "--state-dir", &c->state_dir },
		{ "--host", &c->host },
		{ "--port", &o->port },
		{ "--tls-cert", &c->tls_cert },
		{ "--tls-key", &c->tls_key },
		{ "--engine", &c->engine_bin },
		{ "--engine-ports", &o->ports },
		{ "--engine-runner", &o->runner },
		{ "--max-upload-gib", &o->max_gib },
		{ "--demo-model", &o->demo_model },
		{ "--day0-models", &o->day0_models },
		{ "--login-rate", &o->login_rate },
		{ "--node-name", &c->node_name },
		{ "--advertise-url", &c->advertise_url },
		{ "--join", &c->join_url },
		{ "--join-token-file", &o->join_token_file },
		{ "--join-pin", &c->join_pin },
		{ "--heartbeat-s", &o->heartbeat },
		{ "--metrics-interval-s", &o->metrics_every },
		{ "--metrics-keep-hours", &o->metrics_keep },
		{ "--engine-retry-s", &o->engine_retry },
		{ "--sys-root", &c->sys_root },
		{ "--preflight-file", &c->preflight_file },
		{ "--fabric-socket", &c->fabric_socket },
		{ "--libvirt-uri", &c->libvirt_uri },
		{ "--vm-dir", &c->vm_dir },
		{ "--vm-image-dir", &c->vm_image_dir },
		{ "--webui", &c->webui_dir },
	};

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		size_t k = 0;
		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			usage(stdout);
			exit(0);
		} else if (strcmp(a, "--dev") == 0) {
			c->dev = 1;
			continue;
		} else if (strcmp(a, "--list-routes") == 0) {
			o->list_routes = 1;
			continue;
		} else if (strcmp(a, "--json") == 0) {
			o->json = 1; /* only with --list-routes */
			continue;
		} else if (v == NULL) {
			fprintf(stderr, "privai-admin: unknown option or missing value: %s\n", a);
			return APP_EINVAL;
		}
		i++;
		if (strcmp(a, "--config") == 0) /* read before the rest (parse_args) */
			continue;
		if (strcmp(a, "--model-root") == 0) {
			if (c->n_model_roots == ADMIN_MAX_MODEL_ROOTS - 1) {
				fprintf(stderr, "privai-admin: at most %d --model-root\n", ADMIN_MAX_MODEL_ROOTS - 1);
				return APP_EINVAL;
			}
			c->model_roots[c->n_model_roots++] = v;
			continue;
		}
		while (k < sizeof(valued) / sizeof(valued[0]) && strcmp(a, valued[k].name) != 0)
			k++;
		if (k == sizeof(valued) / sizeof(valued[0])) {
			fprintf(stderr, "privai-admin: unknown option '%s' (see --help)\n", a);
			return APP_EINVAL;
		}
		*valued[k].slot = v;
	}
	return APP_OK;
}

/* The numbers, ranges and modes given as text, checked into the config. */
static int
resolve_values(struct options *o)
{
	struct admin_config *c = &o->cfg;
	long port, gib, lo, hi, rate, hb, every, keep, retry;
	enum runner_mode mode;

	if (parse_int("--port",
		      o->port  ? o->port
		      : c->dev ? "8080"
			       : "8443",
		      0, 65535, &port) < 0 ||
	    parse_int("--heartbeat-s", o->heartbeat, 1, 3600, &hb) < 0 ||
	    parse_int("--metrics-interval-s", o->metrics_every, 1, 3600, &every) < 0 ||
	    parse_int("--metrics-keep-hours", o->metrics_keep, 24, 24 * 366, &keep) < 0 ||
	    parse_int("--engine-retry-s", o->engine_retry, 1, 3600, &retry) < 0 ||
	    parse_int("--login-rate", o->login_rate, 1, 10000, &rate) < 0 ||
	    parse_int("--max-upload-gib", o->max_gib, 1, 1 << 20, &gib) < 0)
		return APP_EINVAL;
	if (sscanf(o->ports, "%ld-%ld", &lo, &hi) != 2 || lo < 1024 || hi > 65535 || lo > hi) {
		fprintf(stderr, "privai-admin: --engine-ports must be LO-HI within 1024-65535, not '%s'\n", o->ports);
		return APP_EINVAL;
	}
	if (runner_parse_mode(o->runner, &mode) < 0) {
		fprintf(stderr, "privai-admin: --engine-runner is auto, systemd, systemd-user or child, not '%s'\n",
			o->runner);
		return APP_EINVAL;
	}
	if (o->roots != NULL && c->n_model_roots == 0) {
		if (str_fmt(o->roots_buf, sizeof(o->roots_buf), "%s", o->roots) != APP_OK) {
			fprintf(stderr, "privai-admin: PRIVAI_MODEL_ROOTS is longer than %zu bytes\n",
				sizeof(o->roots_buf) - 1);
			return APP_EINVAL;
		}
		for (char *save = NULL, *d = strtok_r(o->roots_buf, ":", &save);
		     d && c->n_model_roots < ADMIN_MAX_MODEL_ROOTS - 1; d = strtok_r(NULL, ":", &save))
			c->model_roots[c->n_model_roots++] = d;
	}
	c->engine_runner = (int)mode;
	c->port = (int)port;
	c->max_upload_bytes = (int64_t)gib << 30;
	c->engine_port_lo = (int)lo;
	c->engine_port_hi = (int)hi;
	c->login_per_minute = (int)rate;
	c->heartbeat_s = (int)hb;
	c->metrics_interval_s = (int)every;
	c->metrics_keep_hours = (int)keep;
	c->engine_retry_s = (int)retry;
	return APP_OK;
}

/* Settings that must go together or within bounds. */
static int
check_options(struct options *o)
{
	struct admin_config *c = &o->cfg;

	if (check_cluster_options(o) < 0)
		return APP_EINVAL;
	if (c->dev && strncmp(c->host, "127.", 4) != 0) {
		fprintf(stderr, "privai-admin: --dev serves plain HTTP, so it listens on loopback only, not %s\n",
			c->host);
		return APP_EINVAL;
	}
	if ((c->tls_cert == NULL) != (c->tls_key == NULL)) {
		fprintf(stderr, "privai-admin: --tls-cert and --tls-key go together\n");
		return APP_EINVAL;
	}
	if (strlen(c->state_dir) > ADMIN_STATE_DIR_MAX) {
		fprintf(stderr, "privai-admin: --state-dir is longer than %d bytes\n", ADMIN_STATE_DIR_MAX);
		return APP_EINVAL;
	}
	return APP_OK;
}

/* The directory this binary is in, up levels above it. */
static void
self_dir(char *out, size_t size, int up)
{
	ssize_t n = readlink("/proc/self/exe", out, size - 1);

	out[n > 0 ? n : 0] = '\0';
	for (int i = 0; i <= up; i++) {
		char *slash = strrchr(out, '/');
		if (slash != NULL)
			*slash = '\0';
	}
}

/* The engine and the console's files beside this binary, when not given. */
static int
default_paths(struct options *o)
{
	struct admin_config *c = &o->cfg;
	char self[PATH_MAX];

	if (c->engine_bin == NULL) {
		self_dir(self, sizeof(self), 0);
		if (str_fmt(o->engine_default, sizeof(o->engine_default), "%s/privai-engine", self) != APP_OK) {
			fprintf(stderr, "privai-admin: this binary's directory is too long a path; give --engine\n");
			return APP_ERANGE;
		}
		c->engine_bin = o->engine_default;
	}
	if (c->webui_dir == NULL) {
		self_dir(self, sizeof(self), 1); /* build/privai-admin -> webui/ beside build/ */
		c->webui_dir = str_fmt(o->webui_default, sizeof(o->webui_default), "%s/webui", self) == APP_OK &&
					       access(o->webui_default, R_OK) == 0
				       ? o->webui_default
				       : "/usr/share/privai/webui";
	}
	return APP_OK;
}

/* The configuration: a --config file (or PRIVAI_CONFIG) into the
 * environment first, then PRIVAI_* variables, then the command line. */
static int
parse_args(int argc, char **argv, struct options *o)
{
	const char *config = getenv("PRIVAI_CONFIG");
	int rc;

	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
			config = argv[i + 1];
	if (config != NULL && load_config(config) < 0)
		return APP_EINVAL;
	env_defaults(o);
	if ((rc = read_options(argc, argv, o)) != APP_OK || (rc = resolve_values(o)) != APP_OK ||
	    (rc = check_options(o)) != APP_OK)
		return rc;
	return default_paths(o);
}

static void
print_route(const struct route *rt, void *arg)
{
	if (arg == NULL) {
		printf("%s %s %s\n", rt->method, rt->pattern,
		       (rt->flags & ROUTE_PUBLIC) ? "public" : role_name(rt->min_role));
		return;
	}
	/* what the attacker suite derives every expected answer from */
	printf("{\"method\":\"%s\",\"pattern\":\"%s\",\"role\":\"%s\",\"public\":%s,\"read_only\":%s,"
	       "\"one_time_ok\":%s,\"stream\":%s,\"action\":%s%s%s}\n",
	       rt->method, rt->pattern, role_name(rt->min_role), (rt->flags & ROUTE_PUBLIC) ? "true" : "false",
	       (rt->flags & ROUTE_READ_ONLY) ? "true" : "false", (rt->flags & ROUTE_ONE_TIME_OK) ? "true" : "false",
	       (rt->flags & ROUTE_STREAM) ? "true" : "false", rt->action ? "\"" : "", rt->action ? rt->action : "null",
	       rt->action ? "\"" : "");
}

static char *
read_file(const char *path, char *err)
{
	FILE *fp = fopen(path, "r");
	char *buf = NULL;
	long n;

	if (fp == NULL) {
		app_fail(err, APP_EIO, "%s: %s", path, strerror(errno));
		return NULL;
	}
	if (fseek(fp, 0, SEEK_END) == 0 && (n = ftell(fp)) >= 0 && n < (1 << 20) && fseek(fp, 0, SEEK_SET) == 0 &&
	    (buf = malloc((size_t)n + 1)) != NULL) {
		if (fread(buf, 1, (size_t)n, fp) != (size_t)n) {
			free(buf);
			buf = NULL;
		} else {
			buf[n] = '\0';
		}
	}
	fclose(fp);
	if (buf == NULL)
		app_fail(err, APP_EIO, "%s: cannot read (or larger than 1 MiB)", path);
	return buf;
}

/* Load the certificate, generating a self-signed one on first start. */
static int
setup_tls(struct admin *a, char *err)
{
	static char cert[PATH_MAX], key[PATH_MAX];
	char host[256] = "privai", *key_pem;
	int rc;

	if (a->cfg.dev)
		return APP_OK;
	if (a->cfg.tls_cert == NULL) {
		if (str_fmt(a->tls_dir, sizeof(a->tls_dir), "%s/tls", a->cfg.state_dir) != APP_OK ||
		    str_fmt(cert, sizeof(cert), "%s/cert.pem", a->tls_dir) != APP_OK ||
		    str_fmt(key, sizeof(key), "%s/key.pem", a->tls_dir) != APP_OK)
			return app_fail(err, APP_ERANGE, "%s/tls: the path is too long", a->cfg.state_dir);
		mkdir(a->tls_dir, 0700);
		tls_store_recover(a->tls_dir);
		if (access(cert, R_OK) != 0) {
			gethostname(host, sizeof(host) - 1);
			if ((rc = tls_selfsigned(cert, key, host, err)) != APP_OK)
				return rc;
			log_info("generated a self-signed certificate %s", cert);
		}
		a->cfg.tls_cert = cert;
		a->cfg.tls_key = key;
	}
	if ((a->tls_cert_pem = read_file(a->cfg.tls_cert, err)) == NULL ||
	    (key_pem = read_file(a->cfg.tls_key, err)) == NULL)
		return APP_EIO;
	if ((rc = tls_check_pair(a->tls_cert_pem, key_pem, err)) == APP_OK &&
	    (rc = tls_public_key_pin(a->tls_cert_pem, a->tls_pin, sizeof(a->tls_pin), err)) == APP_OK)
		rc = tls_live_init(a->tls_cert_pem, key_pem, err);
	/* GnuTLS holds the key now; no copy of its text stays behind */
	sodium_memzero(key_pem, strlen(key_pem));
	free(key_pem);
	if (rc != APP_OK)
		return rc;
	a->tls = 1;
	return APP_OK;
}

/* Imports cut short by a restart are marked failed, their partial files removed. */
static void
clean_interrupted(struct admin *a)
{
	DIR *d = opendir(a->models_dir);
	struct dirent *e;
	char path[PATH_MAX + 300];

	char err[APP_ERR_LEN];

	if (db_exec(a->db,
		    "UPDATE models SET state = 'failed', error = 'interrupted by a restart of privai-admin' "
		    "WHERE state = 'importing'",
		    err) != APP_OK)
		log_warn("imports cut short by the restart stay 'importing': %s", err);
	task_abandon_all(a->db, admin_now());
	uploads_sweep(a, admin_now(), 1);
	if (d == NULL)
		return;
	while ((e = readdir(d)) != NULL)
		if (strncmp(e->d_name, ".upload-", 8) == 0 || strncmp(e->d_name, ".download-", 10) == 0) {
			if (str_fmt(path, sizeof(path), "%s/%s", a->models_dir, e->d_name) == APP_OK)
				unlink(path);
		}
	closedir(d);
}

/* A state directory from an older privai-admin, or made by hand, may be
 * open to others: tighten it, and the store's files, before they are used. */
static int
private_modes(const char *dir, char *err)
{
	static const char *const names[] = { "",     "/privai.db",   "/privai.db-wal", "/privai.db-shm", "/backups",
					     "/tls", "/tls/key.pem", "/models",        "/deployments" };
	char path[PATH_MAX + 32];
	struct stat sb;

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(path, sizeof(path), "%s%s", dir, names[i]);
		if (lstat(path, &sb) != 0 || S_ISLNK(sb.st_mode))
			continue;
		mode_t want = S_ISDIR(sb.st_mode) ? 0700 : 0600;
		if ((sb.st_mode & 0777 & ~want) != 0 && chmod(path, sb.st_mode & want) != 0)
			return app_fail(err, APP_EIO, "cannot make %s private (chmod): %s", path, strerror(errno));
	}
	return APP_OK;
}

static int
setup_state(struct admin *a, char *err)
{
	char path[PATH_MAX];
	int rc;

	if (mkdir(a->cfg.state_dir, 0700) != 0 && errno != EEXIST)
		return app_fail(err, APP_EIO, "cannot create %s: %s", a->cfg.state_dir, strerror(errno));
	if (realpath(a->cfg.state_dir, path) == NULL)
		return app_fail(err, APP_EIO, "%s: %s", a->cfg.state_dir, strerror(errno));
	if ((rc = private_modes(path, err)) != APP_OK)
		return rc;
	if (str_fmt(a->models_dir, sizeof(a->models_dir), "%s/models", path) != APP_OK ||
	    str_fmt(a->db_path, sizeof(a->db_path), "%s/privai.db", path) != APP_OK)
		return app_fail(err, APP_ERANGE, "%s: the path is too long", path);
	if (mkdir(a->models_dir, 0700) != 0 && errno != EEXIST)
		return app_fail(err, APP_EIO, "cannot create %s: %s", a->models_dir, strerror(errno));
	a->cfg.model_roots[a->cfg.n_model_roots++] = a->models_dir;
	if ((rc = db_open(a->db_path, &a->db, err)) != APP_OK)
		return rc;
	clean_interrupted(a);
	return APP_OK;
}

/*
 * The host part of this console's URL for other nodes.  Listening on every
 * address (0.0.0.0, the appliance), the bind address says nothing: take
 * the first up, non-loopback IPv4 address, then a global IPv6 one, then
 * the host name.  PRIVAI_ADVERTISE_URL overrides it (privai-firstboot sets
 * it to a static address).
 */
static void
advertise_host(const char *bound, char *out, size_t size)
{
	struct ifaddrs *list, *i;
	char v6[INET6_ADDRSTRLEN + 2] = "";

	if (strcmp(bound, "0.0.0.0") != 0 && strcmp(bound, "::") != 0) {
		snprintf(out, size, "%s", bound);
		return;
	}
	if (gethostname(out, size) != 0)
		snprintf(out, size, "localhost");
	if (getifaddrs(&list) != 0)
		return;
	for (i = list; i != NULL; i = i->ifa_next) {
		char a[INET6_ADDRSTRLEN];
		if (i->ifa_addr == NULL || !(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK))
			continue;
		if (i->ifa_addr->sa_family == AF_INET &&
		    inet_ntop(AF_INET, &((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr, a, sizeof(a)) != NULL) {
			snprintf(out, size, "%s", a);
			v6[0] = '\0';
			break;
		}
		const struct in6_addr *x = &((struct sockaddr_in6 *)(void *)i->ifa_addr)->sin6_addr;
		if (i->ifa_addr->sa_family == AF_INET6 && v6[0] == '\0' && !IN6_IS_ADDR_LINKLOCAL(x) &&
		    inet_ntop(AF_INET6, x, a, sizeof(a)) != NULL)
			snprintf(v6, sizeof(v6), "[%s]", a);
	}
	if (v6[0] != '\0')
		snprintf(out, size, "%s", v6);
	freeifaddrs(list);
}

/* This node in the store (its URL needs the port bound), and the MIG
 * layouts a reboot lost. */
static int
setup_node(struct admin *a, char *err)
{
	static char url[300];
	int applied, failed, rc;

	if (a->cfg.advertise_url == NULL) {
		char host[256];
		advertise_host(a->cfg.host, host, sizeof(host));
		snprintf(url, sizeof(url), "%s://%s:%d", a->tls ? "https" : "http", host, a->port);
		a->cfg.advertise_url = url;
	}
	if ((rc = node_self_register(a, err)) != APP_OK)
		return rc;
	mig_reapply(a, &applied, &failed);
	if (applied + failed > 0)
		log_write(failed > 0 ? LOG_LEVEL_WARN : LOG_LEVEL_INFO, __func__,
			  "MIG layouts applied again at start: %d, failed: %d (see GET /api/v1/gpus)", applied, failed);
	return APP_OK;
}

/* What the engine runs on, asked before any placement can need it. */
static void
report_engine(struct admin *a)
{
	cJSON *e = engine_probe(a->cfg.engine_bin);
	const cJSON *b, *why;

	if (e == NULL) {
		log_error("out of memory asking the engine for its features");
		return;
	}
	atomic_store(&a->engine, e);
	b = cJSON_GetObjectItem(e, "backends");
	why = cJSON_GetObjectItem(e, "error");
	if (why != NULL) {
		log_error("engine: %s; asked again every %d s, and GPU placements are refused until it answers",
			  why->valuestring, a->cfg.engine_retry_s);
		if (engine_watch_start(a) != APP_OK)
			log_error("engine: cannot start the thread that asks it again");
		return;
	}
	char *list = cJSON_PrintUnformatted(b);
	log_info("engine %s runs on %s", a->cfg.engine_bin, list != NULL ? list : "?");
	cJSON_free(list);
}

/* privai-admin reset-password USER [options]: see auth/reset_password.h. */
static int
reset_password_main(int argc, char **argv)
{
	struct options o;
	struct reset_result res;
	struct stat sb;
	char password[AUTH_NEW_PASSWORD_LEN + 8], path[PATH_MAX + 16], actor[64], err[APP_ERR_LEN];

	if (argc < 2 || argv[1][0] == '-') {
		fprintf(stderr, "usage: privai-admin reset-password USER [--state-dir DIR]\n");
		return 2;
	}
	/* argv[1] is USER: parse_args skips it as its argv[0] */
	if (parse_args(argc - 1, argv + 1, &o) < 0)
		return 2;
	if (geteuid() != 0) {
		fprintf(stderr, "privai-admin: reset-password is for root, on the appliance's own console\n");
		return 1;
	}
	if (str_fmt(path, sizeof(path), "%s/privai.db", o.cfg.state_dir) != APP_OK || stat(path, &sb) != 0) {
		fprintf(stderr, "privai-admin: %s: %s (is --state-dir right?)\n", path, strerror(errno));
		return 1;
	}
	if (sodium_init() < 0) {
		fprintf(stderr, "privai-admin: libsodium failed to initialise\n");
		return 1;
	}
	umask(077);
	snprintf(actor, sizeof(actor), "root (%s)",
		 isatty(STDIN_FILENO) && ttyname(STDIN_FILENO) ? ttyname(STDIN_FILENO) : "local");
	if (admin_reset_password(path, argv[1], admin_now(), actor, password, sizeof(password), &res, err) != APP_OK) {
		fprintf(stderr, "privai-admin: reset-password %s: %s\n", argv[1], err);
		return 1;
	}
	if (strcmp(argv[1], "admin") == 0) { /* the first password's file, if still there, is stale now */
		if (str_fmt(path, sizeof(path), "%s/%s", o.cfg.state_dir, SEED_PASSWORD_FILE) == APP_OK)
			unlink(path);
	}
	printf("user '%s': one-time password %s\n(sessions ended: %d, API tokens revoked: %d; it must be changed "
	       "at the next sign-in)\n",
	       argv[1], password, res.sessions_ended, res.tokens_revoked);
	sodium_memzero(password, sizeof(password));
	return 0;
}

int
main(int argc, char **argv)
{
	static struct admin a;
	struct options o;
	char err[APP_ERR_LEN];
	sigset_t sigs;
	int sig, rc;

	if (argc >= 2 && strcmp(argv[1], "reset-password") == 0)
		return reset_password_main(argc - 1, argv + 1);
	if (parse_args(argc, argv, &o) < 0)
		return 2;
	if (o.json && !o.list_routes) {
		fprintf(stderr, "privai-admin: --json goes with --list-routes\n");
		return 2;
	}
	if (o.list_routes) {
		routes_each(print_route, o.json ? (void *)1 : NULL);
		return 0;
	}
	log_init("privai-admin", LOG_LEVEL_INFO);
	/* the store, backups, TLS keys, logs and model files are this
	 * account's alone (0600 files, 0700 directories) */
	umask(077);
	if (sodium_init() < 0 || curl_global_init(CURL_GLOBAL_DEFAULT) != 0) {
		log_error("libsodium or libcurl failed to initialise");
		return 1;
	}
	/* signals are taken by sigwait below; every thread inherits the mask */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);

	a.cfg = o.cfg;
	a.listen_fd = -1;
	a.routes = api_route_tables;
	a.fallback = webui_serve;
	a.started_at = admin_now();
	pthread_mutex_init(&a.db_mu, NULL);
	pthread_mutex_init(&a.fetch_mu, NULL);
	ratelimit_init(&a.login_limit, a.cfg.login_per_minute, a.cfg.login_per_minute);
	/* the port first: a taken one must fail the start before a store or
	 * a password exists */
	if ((rc = httpd_listen(&a, err)) != APP_OK) {
		log_error("%s", err);
		return 1;
	}
	report_engine(&a);
	if ((rc = setup_state(&a, err)) != APP_OK ||
	    (rc = seed_first_start(&a, o.demo_model, o.day0_models, err)) != APP_OK ||
	    (rc = setup_tls(&a, err)) != APP_OK || (rc = supervisor_start(&a, &a.sup, err)) != APP_OK ||
	    (rc = httpd_start(&a, err)) != APP_OK || (rc = setup_node(&a, err)) != APP_OK ||
	    (rc = cluster_start(&a, err)) != APP_OK || (rc = model_hash_start(&a, err)) != APP_OK ||
	    (rc = backup_sched_start(&a, err)) != APP_OK || (rc = metrics_start(&a, err)) != APP_OK) {
		log_error("%s", err);
		httpd_stop(&a);
		cluster_stop(&a);
		model_hash_stop(&a);
		backup_sched_stop(&a);
		supervisor_stop(a.sup);
		if (a.db != NULL)
			db_close(a.db);
		return 1;
	}
	if (a.runner_note[0] != '\0')
		log_info("%s", a.runner_note);
	log_info("engines run as %s", a.runner_how);
	if (a.adopt_note[0] != '\0')
		log_info("%s", a.adopt_note);
	log_info("console on %s://%s:%d/ (state in %s)", a.tls ? "https" : "http", a.cfg.host, a.port, a.cfg.state_dir);
	sd_notify(0, "READY=1");
	for (;;) {
		if (sigwait(&sigs, &sig) != 0)
			continue;
		if (sig == SIGHUP)
			continue; /* nothing to reread yet: settings live in the store */
		break;
	}
	sd_notify(0, "STOPPING=1");
	log_info("stopping");
	httpd_stop(&a);
	deploy_forward_shutdown();
	cluster_stop(&a);
	model_fetch_shutdown(&a);
	model_hash_stop(&a);
	backup_sched_stop(&a);
	metrics_stop(&a);
	supervisor_stop(a.sup);
	db_close(a.db);
	ratelimit_destroy(&a.login_limit);
	free(a.tls_cert_pem);
	sodium_memzero(a.relay_key, sizeof(a.relay_key));
	tls_live_free();
	engine_watch_stop(&a);
	cJSON_Delete(atomic_load(&a.engine));
	curl_global_cleanup();
	return 0;
}
