/*
 * privai-fabric serve: keeps Fabric Manager configured and started where
 * the node has NVSwitches, watches it, and answers GET /status (JSON) on
 * a unix socket for privai-admin: the node's fabric, Fabric Manager's
 * verdict, and whether NCCL's topology file matches the hardware.
 */
#include <errno.h>
#include <grp.h>
#include <microhttpd.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>

#include "status.h"
#include "fabric.h"
#include "fabric_cmd.h"
#include "fm_config.h"
#include "fm_status.h"
#include "fm_unit.h"
#include "hostfs.h"
#include "nccl_topo.h"

#define LOOP_WINDOW_S 600 /* restarts counted over ten minutes */
#define LOOP_RESTARTS 3   /* this many in the window is a loop */

static volatile sig_atomic_t stopping;

struct server {
	pthread_mutex_t lock;
	char *status;      /* the last report, JSON */
	char bus_err[320]; /* why systemd's bus could not be opened, or "" */
	time_t window_start;
	uint32_t window_restarts;
};

static void
on_signal(int sig)
{
	(void)sig;
	stopping = 1;
}

static enum MHD_Result
answer(void *cls, struct MHD_Connection *c, const char *url, const char *method, const char *version,
       const char *upload, size_t *upload_size, void **ctx)
{
	struct server *srv = cls;
	struct MHD_Response *r;
	const char *body = "{\"error\":\"not found: GET /status\"}\n";
	unsigned code = MHD_HTTP_NOT_FOUND;
	char *copy = NULL;
	enum MHD_Result ret;

	(void)version, (void)upload, (void)upload_size, (void)ctx;
	if (strcmp(method, "GET") != 0) {
		body = "{\"error\":\"only GET\"}\n";
		code = MHD_HTTP_METHOD_NOT_ALLOWED;
	} else if (strcmp(url, "/status") == 0) {
		pthread_mutex_lock(&srv->lock);
		copy = srv->status ? strdup(srv->status) : NULL;
		pthread_mutex_unlock(&srv->lock);
		body = copy ? copy : "{\"error\":\"out of memory\"}\n";
		code = copy ? MHD_HTTP_OK : MHD_HTTP_INTERNAL_SERVER_ERROR;
	}
	r = MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
	free(copy);
	if (r == NULL)
		return MHD_NO;
	MHD_add_response_header(r, "Content-Type", "application/json");
	ret = MHD_queue_response(c, code, r);
	MHD_destroy_response(r);
	return ret;
}

/* 1 (and err says why) where something other than a socket is at p:
 * never replaced, whoever put it there. */
static int
other_than_socket(const char *p, char *err, size_t errsize)
{
	struct stat st;

	if (lstat(p, &st) != 0 || S_ISSOCK(st.st_mode))
		return 0;
	snprintf(err, errsize, "%s exists and is not a socket: not replaced", p);
	return 1;
}

/* The status socket, listening before its path appears: bound and set
 * listening under PATH.new, then renamed over PATH, so that a client that
 * waits for the path (the admin's heartbeat, a test) never finds a socket
 * that refuses connections for want of listen(). */
static int
listen_unix(const char *path, char *err, size_t errsize)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	struct group *g;
	int fd;

	if (snprintf(a.sun_path, sizeof(a.sun_path), "%s.new", path) >= (int)sizeof(a.sun_path)) {
		snprintf(err, errsize, "%s: path too long for a socket", path);
		return APP_EIO;
	}
	if (other_than_socket(path, err, errsize) || other_than_socket(a.sun_path, err, errsize))
		return APP_EIO;
	unlink(a.sun_path); /* a run that stopped before its rename left it, if anything */
	/* created 0600 (a umask for the bind alone, before any other thread
	 * starts): the socket is never open wider than it ends up, where a
	 * chmod after the bind left it the umask's mode for a moment */
	mode_t old_mask = umask(0177);
	int bound = (fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) >= 0 &&
		    bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
	umask(old_mask);
	if (!bound || listen(fd, 16) < 0) {
		snprintf(err, errsize, "%s: %s", a.sun_path, strerror(errno));
		if (bound)
			unlink(a.sun_path);
		if (fd >= 0)
			close(fd);
		return APP_EIO;
	}
	/* privai-admin reads it as the privai group; nobody else needs to */
	if ((g = getgrnam("privai")) != NULL && chown(a.sun_path, (uid_t)-1, g->gr_gid) == 0)
		chmod(a.sun_path, 0660);
	else
		chmod(a.sun_path, 0600);
	if (rename(a.sun_path, path) != 0) { /* replaces a previous run's */
		snprintf(err, errsize, "%s: %s", path, strerror(errno));
		unlink(a.sun_path);
		close(fd);
		return APP_EIO;
	}
	return fd;
}

/* The restart count a while ago against now: a loop that systemd's
 * restarts hide from a single look. */
static int
restart_loop(struct server *srv, const struct fm_unit_state *u)
{
	time_t now = time(NULL);

	if (srv->window_start == 0 || now - srv->window_start > LOOP_WINDOW_S || u->n_restarts < srv->window_restarts) {
		srv->window_start = now;
		srv->window_restarts = u->n_restarts;
	}
	return u->n_restarts - srv->window_restarts >= LOOP_RESTARTS;
}

static cJSON *
topology_json(const struct fabric_opts *o, const struct fabric *f)
{
	cJSON *t = cJSON_CreateObject(), *problems = cJSON_CreateArray();
	size_t len;
	char *text = hostfs_read_text(o->root, o->s.nccl_topo_file, 4 << 20, &len);

	cJSON_AddStringToObject(t, "path", o->s.nccl_topo_file);
	cJSON_AddBoolToObject(t, "present", text != NULL);
	cJSON_AddBoolToObject(t, "needed", f->topo.virtual_pcie && f->cpu.guest && f->topo.n_gpus > 0);
	if (text != NULL)
		cJSON_AddBoolToObject(t, "valid", nccl_topo_check(f, text, len, problems) == 0);
	cJSON_AddItemToObject(t, "problems", problems);
	free(text);
	return t;
}

/* The last report of privai-fabric validate, or null when there is none
 * (or it is not JSON: a run still writing it, or an old format). */
static cJSON *
validation_json(const struct fabric_opts *o)
{
	size_t len;
	char *text = hostfs_read_text(o->root, o->s.validation_file, 1 << 20, &len);
	cJSON *j = text != NULL ? cJSON_ParseWithLength(text, len) : NULL;

	free(text);
	if (j != NULL && cJSON_IsObject(j) && cJSON_IsArray(cJSON_GetObjectItem(j, "tests")))
		return j;
	cJSON_Delete(j);
	return cJSON_CreateNull();
}

static void
refresh(struct fabric_opts *o, struct server *srv, sd_bus *bus)
{
	struct fabric f;
	struct fm_unit_state unit;
	struct fm_status st;
	char err[320] = "", *text;
	int have;
	cJSON *j;

	if (fabric_read(o->root, fabric_live(o), &f, err, sizeof(err)) < 0) {
		fprintf(stderr, "privai-fabric serve: %s\n", err);
		return;
	}
	if (bus == NULL)
		snprintf(err, sizeof(err), "%s", srv->bus_err);
	have = bus != NULL && fm_unit_read(bus, o->s.fm_unit, &unit, err, sizeof(err)) == 0;
	fm_status_judge(&f, &o->s, have ? &unit : NULL, err, have && restart_loop(srv, &unit), &st);
	j = cJSON_CreateObject();
	cJSON_AddItemToObject(j, "fabric_manager", fm_status_json(&f, &o->s, &st));
	cJSON_AddItemToObject(j, "nccl_topology", topology_json(o, &f));
	cJSON *env = NULL;
	if (fabric_nccl_env_sync(o, &f, &env) < 0) {
		const char *why = cJSON_GetStringValue(cJSON_GetObjectItem(env, "error"));
		fprintf(stderr, "privai-fabric serve: cannot write %s: %s\n", o->s.nccl_env_file,
			why != NULL ? why : "out of memory");
	}
	if (env != NULL)
		cJSON_AddItemToObject(j, "nccl_env", env);
	cJSON_AddItemToObject(j, "validation", validation_json(o));
	cJSON_AddItemToObject(j, "node", fabric_json(&f));
	cJSON_AddNumberToObject(j, "checked_at", (double)time(NULL));
	text = cJSON_PrintUnformatted(j);
	cJSON_Delete(j);
	if (text != NULL) {
		pthread_mutex_lock(&srv->lock);
		free(srv->status);
		srv->status = text;
		pthread_mutex_unlock(&srv->lock);
	}
	fabric_free(&f);
}

/* At start-up: Fabric Manager configured and started where the node needs it. */
static void
bring_up(struct fabric_opts *o, sd_bus *bus)
{
	struct fabric f;
	struct fm_unit_state unit;
	char err[320];
	int changed;

	if (fabric_read(o->root, fabric_live(o), &f, err, sizeof(err)) < 0)
		return;
	if (f.topo.n_nvswitches > 0 && bus != NULL) {
		if (fm_config_apply(o->root, &o->s, 0, &changed, err, sizeof(err)) < 0)
			fprintf(stderr, "privai-fabric serve: Fabric Manager's config: %s\n", err);
		else if (fm_unit_read(bus, o->s.fm_unit, &unit, err, sizeof(err)) == 0 &&
			 strcmp(unit.load, "loaded") == 0 && (strcmp(unit.active, "active") != 0 || changed > 0) &&
			 fm_unit_job(bus, o->s.fm_unit, changed > 0 ? "RestartUnit" : "StartUnit", err, sizeof(err)) <
				 0)
			fprintf(stderr, "privai-fabric serve: %s\n", err);
	}
	fabric_free(&f);
}

int
cmd_serve(struct fabric_opts *o, int argc, char **argv)
{
	struct server srv = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct MHD_Daemon *d;
	sd_bus *bus = NULL;
	char err[320];
	int fd;

	if (argc > 0)
		return fabric_usage_error("serve", argv[0]);
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	signal(SIGPIPE, SIG_IGN);
	if (fm_bus_open(o->s.user_bus, &bus, err, sizeof(err)) < 0) {
		snprintf(srv.bus_err, sizeof(srv.bus_err), "%s", err);
		fprintf(stderr, "privai-fabric serve: %s; Fabric Manager is reported, not managed\n", err);
	}
	if ((fd = listen_unix(o->s.status_socket, err, sizeof(err))) < 0) {
		sd_bus_flush_close_unref(bus);
		return fabric_fail("serve", err);
	}
	bring_up(o, bus);
	refresh(o, &srv, bus);
	d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL, answer, &srv, MHD_OPTION_LISTEN_SOCKET, fd,
			     MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_END);
	if (d == NULL) {
		close(fd);
		unlink(o->s.status_socket);
		sd_bus_flush_close_unref(bus);
		free(srv.status);
		return fabric_fail("serve", "the HTTP server did not start on the status socket");
	}
	fprintf(stderr, "privai-fabric serve: status on %s, checking every %d s\n", o->s.status_socket,
		o->s.interval_s);
	sd_notify(0, "READY=1");
	while (!stopping) {
		for (int t = 0; t < o->s.interval_s * 10 && !stopping; t++)
			usleep(100000);
		if (!stopping)
			refresh(o, &srv, bus);
	}
	sd_notify(0, "STOPPING=1");
	MHD_stop_daemon(d);
	unlink(o->s.status_socket);
	sd_bus_flush_close_unref(bus);
	free(srv.status);
	return 0;
}
