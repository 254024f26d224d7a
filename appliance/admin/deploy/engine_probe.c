/* `privai-engine features --json`, run at start and checked, and again
 * while it fails. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "admin.h"
#include "log.h"
#include "status.h"
#include "worker.h"
#include "deploy/engine_probe.h"

/* Generous: an engine's first start on a cold page cache maps its libraries
 * from disk (seconds), and systemd waits 90 s for privai-admin to be ready. */
#define PROBE_TIMEOUT_S 60
#define PROBE_MAX_BYTES 16384
#define MAX_BACKENDS 8
#define MAX_TEMPLATES 32

static cJSON *
failed(const char *fmt, const char *a, const char *b)
{
	char why[300];
	cJSON *o = cJSON_CreateObject();

	snprintf(why, sizeof(why), fmt, a, b);
	if (o == NULL || cJSON_AddArrayToObject(o, "backends") == NULL ||
	    cJSON_AddStringToObject(o, "error", why) == NULL) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

/* A backend or SIMD name: 1-31 of [a-z0-9_-]. */
static int
name_ok(const cJSON *v)
{
	if (!cJSON_IsString(v) || v->valuestring[0] == '\0' || strlen(v->valuestring) > 31)
		return 0;
	for (const char *p = v->valuestring; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_' || *p == '-'))
			return 0;
	return 1;
}

/* A map of backend name to one line ("devices": what it runs on,
 * "unavailable": why it cannot run), copied with names checked and
 * lines cut at 300 bytes; anything else in it is left out. */
static void
copy_lines(cJSON *o, const cJSON *e, const char *key)
{
	const cJSON *map = cJSON_GetObjectItemCaseSensitive(e, key), *v;
	cJSON *to;
	int n = 0;

	if (!cJSON_IsObject(map) || (to = cJSON_AddObjectToObject(o, key)) == NULL)
		return;
	cJSON_ArrayForEach (v, map) {
		char line[301];
		cJSON name = { .type = cJSON_String, .valuestring = v->string };
		if (n++ >= MAX_BACKENDS || !cJSON_IsString(v) || !name_ok(&name))
			continue;
		snprintf(line, sizeof(line), "%s", v->valuestring);
		cJSON_AddStringToObject(to, v->string, line);
	}
}

cJSON *
engine_report_clean(const cJSON *e)
{
	const cJSON *b = cJSON_GetObjectItemCaseSensitive(e, "backends"), *v;
	const cJSON *simd = cJSON_GetObjectItemCaseSensitive(e, "cpu_simd");
	const cJSON *error = cJSON_GetObjectItemCaseSensitive(e, "error");

	if (!cJSON_IsObject(e))
		return failed("engine features must be an object%s%s", "", "");
	if (!cJSON_IsArray(b) || cJSON_GetArraySize(b) > MAX_BACKENDS)
		return failed("engine features: backends must be an array of at most 8 names%s%s", "", "");
	cJSON *o = cJSON_CreateObject(), *list = cJSON_AddArrayToObject(o, "backends");
	if (list == NULL) {
		cJSON_Delete(o);
		return NULL;
	}
	cJSON_ArrayForEach (v, b) {
		if (!name_ok(v)) {
			cJSON_Delete(o);
			return failed("engine features: a backend is not a name of 1-31 of a-z, 0-9, '_', '-'%s%s", "",
				      "");
		}
		cJSON_AddItemToArray(list, cJSON_CreateString(v->valuestring));
	}
	if (name_ok(simd))
		cJSON_AddStringToObject(o, "cpu_simd", simd->valuestring);
	copy_lines(o, e, "devices");
	copy_lines(o, e, "unavailable");
	/* the chat templates it renders (the console's choices); an older
	 * engine has none to say, and bad entries are left out */
	const cJSON *tmpl = cJSON_GetObjectItemCaseSensitive(e, "chat_templates");
	if (cJSON_IsArray(tmpl) && cJSON_GetArraySize(tmpl) <= MAX_TEMPLATES) {
		cJSON *names = cJSON_AddArrayToObject(o, "chat_templates");
		cJSON_ArrayForEach (v, tmpl)
			if (names != NULL && name_ok(v))
				cJSON_AddItemToArray(names, cJSON_CreateString(v->valuestring));
	}
	/* the transports a split model's ranks can meet over (tensor parallel) */
	const cJSON *coll = cJSON_GetObjectItemCaseSensitive(e, "collectives");
	if (cJSON_IsArray(coll) && cJSON_GetArraySize(coll) <= MAX_BACKENDS) {
		cJSON *names = cJSON_AddArrayToObject(o, "collectives");
		cJSON_ArrayForEach (v, coll)
			if (names != NULL && name_ok(v))
				cJSON_AddItemToArray(names, cJSON_CreateString(v->valuestring));
	}
	copy_lines(o, e, "collectives_unavailable");
	/* why a node has no backends, as its admin saw it, at most 300 bytes */
	if (cJSON_IsString(error) && cJSON_GetArraySize(b) == 0) {
		char why[301];
		snprintf(why, sizeof(why), "%s", error->valuestring);
		cJSON_AddStringToObject(o, "error", why);
	}
	return o;
}

cJSON *
engine_probe(const char *engine_bin)
{
	char out[PROBE_MAX_BYTES + 1];
	size_t len = 0;
	int fds[2], status = 0, timed_out = 0;

	if (access(engine_bin, X_OK) != 0)
		return failed("cannot run %s: %s", engine_bin, strerror(errno));
	if (pipe2(fds, O_CLOEXEC) != 0)
		return failed("asking %s for its features: %s", engine_bin, strerror(errno));
	pid_t pid = fork();
	if (pid < 0) {
		close(fds[0]);
		close(fds[1]);
		return failed("asking %s for its features: %s", engine_bin, strerror(errno));
	}
	if (pid == 0) {
		dup2(fds[1], STDOUT_FILENO);
		int null = open("/dev/null", O_WRONLY);
		if (null >= 0)
			dup2(null, STDERR_FILENO);
		execl(engine_bin, engine_bin, "features", "--json", (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	int64_t deadline = admin_mono_ms() + PROBE_TIMEOUT_S * 1000;
	for (;;) {
		struct pollfd p = { fds[0], POLLIN, 0 };
		int64_t left = deadline - admin_mono_ms();
		if (left <= 0 || poll(&p, 1, (int)left) == 0) {
			kill(pid, SIGKILL);
			timed_out = 1;
			break;
		}
		ssize_t n = read(fds[0], out + len, PROBE_MAX_BYTES - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0 || (len += (size_t)n) == PROBE_MAX_BYTES)
			break;
	}
	close(fds[0]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	out[len] = '\0';
	if (timed_out) {
		char secs[16];
		snprintf(secs, sizeof(secs), "%d s", PROBE_TIMEOUT_S);
		return failed("%s features --json did not finish within %s", engine_bin, secs);
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return failed("%s features --json failed (an engine older than the features command?)%s", engine_bin,
			      "");
	cJSON *j = cJSON_Parse(out);
	if (j == NULL)
		return failed("%s features --json did not print JSON%s", engine_bin, "");
	cJSON *o = engine_report_clean(j);
	cJSON_Delete(j);
	return o;
}

struct engine_watch {
	struct worker w;
	struct admin *a;
	cJSON *replaced; /* the failed report, freed at stop: a reader may still hold it */
	char last[300];  /* the last reason logged, so that a steady one is logged once */
};

static void *
watch_main(void *arg)
{
	struct engine_watch *ew = arg;
	struct admin *a = ew->a;

	while (worker_wait(&ew->w, a->cfg.engine_retry_s)) {
		cJSON *e = engine_probe(a->cfg.engine_bin);
		const cJSON *why = cJSON_GetObjectItem(e, "error");
		if (e != NULL && why == NULL) {
			ew->replaced = atomic_exchange(&a->engine, e);
			char *list = cJSON_PrintUnformatted(cJSON_GetObjectItem(e, "backends"));
			log_info("engine %s answers now: runs on %s", a->cfg.engine_bin, list != NULL ? list : "?");
			cJSON_free(list);
			return NULL;
		}
		if (cJSON_IsString(why) && strcmp(why->valuestring, ew->last) != 0) {
			log_error("engine, asked again: %s", why->valuestring);
			snprintf(ew->last, sizeof(ew->last), "%s", why->valuestring);
		}
		cJSON_Delete(e);
	}
	return NULL;
}

int
engine_watch_start(struct admin *a)
{
	struct engine_watch *ew = calloc(1, sizeof(*ew));

	if (ew == NULL)
		return APP_ENOMEM;
	ew->a = a;
	/* the start-up failure is logged already: log a reason only when it changes */
	const cJSON *why = cJSON_GetObjectItem(atomic_load(&a->engine), "error");
	if (cJSON_IsString(why))
		snprintf(ew->last, sizeof(ew->last), "%s", why->valuestring);
	if (worker_start(&ew->w, watch_main, ew) != 0) {
		free(ew);
		return APP_EIO;
	}
	a->engine_watch = ew;
	return APP_OK;
}

void
engine_watch_stop(struct admin *a)
{
	struct engine_watch *ew = a->engine_watch;

	if (ew == NULL)
		return;
	worker_stop(&ew->w);
	cJSON_Delete(ew->replaced);
	free(ew);
	a->engine_watch = NULL;
}
