/* A node's host health: the preflight report and privai-fabric's status, checked. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "status.h"
#include "strfmt.h"
#include "admin.h"
#include "cluster/host_health.h"

#define MAX_FILE_BYTES (1 << 20)      /* a preflight report is some 20 KB */
#define MAX_ANSWER_BYTES (256 * 1024) /* privai-fabric's status is some 10 KB */
#define MAX_CHECKS 512
#define MAX_KEPT 96 /* warn and fail checks kept; more are counted (a node's report stays small) */
#define MAX_PROBLEMS 64
#define MAX_TEXT 512

static const char *const check_statuses[] = { "pass", "warn", "fail", "skip", NULL };
static const char *const fm_verdicts[] = { "ready",  "not-needed", "not-installed", "version-mismatch", "restart-loop",
					   "failed", "stopped",    "starting",      "unknown",          NULL };

static int
one_of(const char *s, const char *const *set)
{
	for (int i = 0; set[i] != NULL; i++)
		if (strcmp(s, set[i]) == 0)
			return i;
	return APP_ENOTFOUND;
}

/* {"state": state, "error": message} */
static cJSON *
part_error(const char *state, const char *fmt, ...)
{
	char msg[APP_ERR_LEN];
	va_list ap;
	cJSON *j = cJSON_CreateObject();

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (j == NULL || cJSON_AddStringToObject(j, "state", state) == NULL ||
	    cJSON_AddStringToObject(j, "error", msg) == NULL) {
		cJSON_Delete(j);
		return NULL;
	}
	return j;
}

/* Copy in.key to out when it is a string of at most max bytes; absent is
 * fine unless required.  0, or -1 with err naming where.key. */
static int
copy_string(cJSON *out, const cJSON *in, const char *key, size_t max, int required, const char *where, char *err)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(in, key);

	if (v == NULL && !required)
		return 0;
	if (!cJSON_IsString(v) || strlen(v->valuestring) > max) {
		msg_fmt(err, APP_ERR_LEN, "%s%s must be a string of at most %zu bytes", where, key, max);
		return APP_EINVAL;
	}
	return cJSON_AddStringToObject(out, key, v->valuestring) != NULL ? APP_OK : APP_ENOMEM;
}

static int
copy_number(cJSON *out, const cJSON *in, const char *key, double lo, double hi, const char *where, char *err)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(in, key);

	if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi)) {
		msg_fmt(err, APP_ERR_LEN, "%s%s must be a number in %.0f..%.0f", where, key, lo, hi);
		return APP_EINVAL;
	}
	return cJSON_AddNumberToObject(out, key, v->valuedouble) != NULL ? APP_OK : APP_ENOMEM;
}

static int
copy_bool(cJSON *out, const cJSON *in, const char *key, int required, const char *where, char *err)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(in, key);

	if (v == NULL && !required)
		return 0;
	if (!cJSON_IsBool(v)) {
		msg_fmt(err, APP_ERR_LEN, "%s%s must be true or false", where, key);
		return APP_EINVAL;
	}
	return cJSON_AddBoolToObject(out, key, cJSON_IsTrue(v)) != NULL ? APP_OK : APP_ENOMEM;
}

/* A part another node sent as missing or failed: its state and error, checked. */
static cJSON *
part_not_ok(const cJSON *in, const char *state, const char *what)
{
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(in, "error");

	if (strcmp(state, "missing") != 0 && strcmp(state, "error") != 0)
		return part_error("error", "%s.state must be ok, missing or error", what);
	if (!cJSON_IsString(e) || strlen(e->valuestring) > MAX_TEXT)
		return part_error("error", "%s.error must be a string of at most %d bytes", what, MAX_TEXT);
	return part_error(state, "%s", e->valuestring);
}

/* One check: its fields, checked and copied; warn and fail ones go to out. */
static int
preflight_check(const cJSON *c, int i, cJSON *out, int counted[4], char *err)
{
	char where[48];
	const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
	const cJSON *status = cJSON_GetObjectItemCaseSensitive(c, "status");
	int k;

	snprintf(where, sizeof(where), "checks[%d].", i);
	if (!cJSON_IsObject(c))
		return app_fail(err, APP_EINVAL, "checks[%d] must be an object", i);
	if (!cJSON_IsString(id) || id->valuestring[0] == '\0' || strlen(id->valuestring) > 64 ||
	    strspn(id->valuestring, "abcdefghijklmnopqrstuvwxyz0123456789._-") != strlen(id->valuestring))
		return app_fail(err, APP_EINVAL, "%sid must be 1 to 64 of a-z 0-9 . _ -", where);
	if (!cJSON_IsString(status) || (k = one_of(status->valuestring, check_statuses)) < 0)
		return app_fail(err, APP_EINVAL, "%sstatus must be pass, warn, fail or skip", where);
	counted[k]++;
	if ((k != 1 && k != 2) || cJSON_GetArraySize(out) >= MAX_KEPT)
		return 0;
	cJSON *o = cJSON_CreateObject();
	if (o == NULL || !cJSON_AddItemToArray(out, o)) {
		cJSON_Delete(o);
		return app_fail(err, APP_ENOMEM, "out of memory");
	}
	if (cJSON_AddStringToObject(o, "id", id->valuestring) == NULL ||
	    cJSON_AddStringToObject(o, "status", status->valuestring) == NULL ||
	    copy_string(o, c, "title", MAX_TEXT, 0, where, err) < 0 ||
	    copy_string(o, c, "found", MAX_TEXT, 1, where, err) < 0 ||
	    copy_string(o, c, "expected", MAX_TEXT, 1, where, err) < 0 ||
	    copy_string(o, c, "fix", MAX_TEXT, 1, where, err) < 0)
		return err[0] ? APP_EINVAL : app_fail(err, APP_ENOMEM, "out of memory");
	return 0;
}

/*
 * A preflight report, whole (from privai-tune) or already cleaned (from
 * another node): "summary" must agree with the checks it carries, all of
 * the warn and fail ones, at most the pass and skip ones.
 */
static cJSON *
preflight_clean(const cJSON *in, double checked_at)
{
	char err[APP_ERR_LEN] = "";
	const cJSON *checks = cJSON_GetObjectItemCaseSensitive(in, "checks");
	const cJSON *summary = cJSON_GetObjectItemCaseSensitive(in, "summary");
	const cJSON *state = cJSON_GetObjectItemCaseSensitive(in, "state");
	int counted[4] = { 0 }, n;
	cJSON *out, *sum, *list;

	if (!cJSON_IsObject(in))
		return part_error("error", "the preflight report must be a JSON object");
	if (cJSON_IsString(state) && strcmp(state->valuestring, "ok") != 0)
		return part_not_ok(in, state->valuestring, "preflight");
	if (!cJSON_IsArray(checks) || (n = cJSON_GetArraySize(checks)) > MAX_CHECKS)
		return part_error("error", "preflight: checks must be an array of at most %d", MAX_CHECKS);
	if ((out = cJSON_CreateObject()) == NULL || cJSON_AddStringToObject(out, "state", "ok") == NULL ||
	    (sum = cJSON_AddObjectToObject(out, "summary")) == NULL ||
	    (list = cJSON_AddArrayToObject(out, "checks")) == NULL)
		goto nomem;
	if (checked_at < 0 && copy_number(out, in, "checked_at", 0, 1e11, "preflight.", err) < 0)
		goto bad;
	if (checked_at >= 0 && cJSON_AddNumberToObject(out, "checked_at", checked_at) == NULL)
		goto nomem;
	if (copy_string(out, in, "profile", 64, 0, "preflight.", err) < 0)
		goto bad;
	for (int i = 0; i < n; i++)
		if (preflight_check(cJSON_GetArrayItem(checks, i), i, list, counted, err) < 0)
			goto bad;
	for (int k = 0; k < 4; k++) {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(summary, check_statuses[k]);
		int exact = k == 1 || k == 2;
		if (!cJSON_IsNumber(v) || v->valuedouble < counted[k] || v->valuedouble > MAX_CHECKS ||
		    (exact && v->valuedouble != counted[k])) {
			msg_fmt(err, APP_ERR_LEN,
				"preflight: summary.%s must be a number that agrees with the checks (%d %s)",
				check_statuses[k], counted[k], check_statuses[k]);
			goto bad;
		}
		if (cJSON_AddNumberToObject(sum, check_statuses[k], v->valuedouble) == NULL)
			goto nomem;
	}
	return out;
bad:
	if (err[0] != '\0') {
		cJSON_Delete(out);
		return part_error("error", "%s", err);
	}
nomem:
	cJSON_Delete(out);
	return NULL;
}

cJSON *
host_preflight_read(const char *path)
{
	struct stat sb;
	char *text = NULL;
	ssize_t got = 0;
	cJSON *in, *out;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);

	if (fd < 0 && errno == ENOENT)
		return part_error("missing", "no preflight report at %s yet (privai-preflight.service writes it)",
				  path);
	if (fd < 0)
		return part_error("error", "%s: %s", path, strerror(errno));
	if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode) || sb.st_size > MAX_FILE_BYTES) {
		close(fd);
		return part_error("error", "%s: not a regular file of at most %d bytes", path, MAX_FILE_BYTES);
	}
	if ((text = malloc((size_t)sb.st_size + 1)) == NULL) {
		close(fd);
		return NULL;
	}
	while (got < sb.st_size) {
		ssize_t n = read(fd, text + got, (size_t)(sb.st_size - got));
		if (n <= 0)
			break;
		got += n;
	}
	close(fd);
	text[got] = '\0';
	if ((in = cJSON_ParseWithLength(text, (size_t)got)) == NULL)
		out = part_error("error", "%s is not JSON (a half-written file?)", path);
	else
		out = preflight_clean(in, (double)sb.st_mtime);
	cJSON_Delete(in);
	free(text);
	return out;
}

static const char *const nccl_env_states[] = { "written", "current", "hand-edited", "error", NULL };

/* The engines' NCCL settings as privai-fabric keeps them (nccl.env): path,
 * state, and at most 8 settings of {name (NCCL_...), value or null, why}.
 * Absent from an older privai-fabric; 0, or an APP_E* code with err. */
static int
nccl_env_clean(cJSON *out, const cJSON *in, char *err)
{
	const cJSON *env = cJSON_GetObjectItemCaseSensitive(in, "nccl_env"), *s;
	const cJSON *state = cJSON_GetObjectItemCaseSensitive(env, "state");
	const cJSON *settings = cJSON_GetObjectItemCaseSensitive(env, "settings");
	cJSON *o, *a;
	int n, rc, i = 0;

	if (env == NULL)
		return 0;
	if (!cJSON_IsObject(env) || !cJSON_IsString(state) || one_of(state->valuestring, nccl_env_states) < 0 ||
	    !cJSON_IsArray(settings) || (n = cJSON_GetArraySize(settings)) > 8) {
		msg_fmt(err, APP_ERR_LEN,
			"nccl_env must be an object with a state privai-fabric gives and at most 8 settings");
		return APP_EINVAL;
	}
	if ((o = cJSON_AddObjectToObject(out, "nccl_env")) == NULL ||
	    cJSON_AddStringToObject(o, "state", state->valuestring) == NULL ||
	    (a = cJSON_AddArrayToObject(o, "settings")) == NULL)
		return APP_ENOMEM;
	if ((rc = copy_string(o, env, "path", 4096, 1, "nccl_env.", err)) < 0 ||
	    (rc = copy_string(o, env, "error", MAX_TEXT, 0, "nccl_env.", err)) < 0)
		return rc;
	cJSON_ArrayForEach (s, settings) {
		const cJSON *name = cJSON_GetObjectItemCaseSensitive(s, "name");
		const cJSON *value = cJSON_GetObjectItemCaseSensitive(s, "value");
		cJSON *os;
		if (!cJSON_IsString(name) || strncmp(name->valuestring, "NCCL_", 5) != 0 ||
		    strlen(name->valuestring) > 32 || !(cJSON_IsNull(value) || cJSON_IsString(value))) {
			msg_fmt(err, APP_ERR_LEN,
				"nccl_env.settings[%d] needs a name NCCL_... of at most 32 bytes and "
				"a value that is a string or null",
				i);
			return APP_EINVAL;
		}
		if ((os = cJSON_CreateObject()) == NULL || !cJSON_AddItemToArray(a, os))
			return APP_ENOMEM;
		if (cJSON_AddStringToObject(os, "name", name->valuestring) == NULL ||
		    (cJSON_IsNull(value) ? cJSON_AddNullToObject(os, "value")
					 : cJSON_AddStringToObject(os, "value", value->valuestring)) == NULL)
			return APP_ENOMEM;
		if (cJSON_IsString(value) && strlen(value->valuestring) > 256) {
			msg_fmt(err, APP_ERR_LEN, "nccl_env.settings[%d].value must be at most 256 bytes", i);
			return APP_EINVAL;
		}
		if ((rc = copy_string(os, s, "why", MAX_TEXT, 1, "nccl_env.settings[].", err)) < 0)
			return rc;
		i++;
	}
	return 0;
}

static const char *const validation_kinds[] = { "rdma", "rdma-gdr", "nccl-node", "nccl-nodes", NULL };
static const char *const validation_states[] = { "pass", "fail", "no-mark", "skipped", "error", NULL };

/* One test of privai-fabric validate's report (validate.h). */
static int
validation_test_clean(cJSON *out, const cJSON *t, int i, char *err)
{
	const cJSON *kind = cJSON_GetObjectItemCaseSensitive(t, "kind");
	const cJSON *state = cJSON_GetObjectItemCaseSensitive(t, "state");
	const cJSON *hints = cJSON_GetObjectItemCaseSensitive(t, "hints"), *h;
	cJSON *oh;
	int rc;

	if (!cJSON_IsObject(t) || !cJSON_IsString(kind) || one_of(kind->valuestring, validation_kinds) < 0 ||
	    !cJSON_IsString(state) || one_of(state->valuestring, validation_states) < 0 || !cJSON_IsArray(hints) ||
	    cJSON_GetArraySize(hints) > 8) {
		msg_fmt(err, APP_ERR_LEN,
			"validation.tests[%d] needs a kind and state privai-fabric gives and at most 8 hints", i);
		return APP_EINVAL;
	}
	if (cJSON_AddStringToObject(out, "kind", kind->valuestring) == NULL ||
	    cJSON_AddStringToObject(out, "state", state->valuestring) == NULL ||
	    (oh = cJSON_AddArrayToObject(out, "hints")) == NULL)
		return APP_ENOMEM;
	if ((rc = copy_string(out, t, "name", 96, 1, "validation.tests[].", err)) < 0 ||
	    (rc = copy_string(out, t, "unit", 8, 0, "validation.tests[].", err)) < 0 ||
	    (rc = copy_string(out, t, "mark_why", MAX_TEXT, 0, "validation.tests[].", err)) < 0 ||
	    (rc = copy_string(out, t, "why", MAX_TEXT, 0, "validation.tests[].", err)) < 0)
		return rc;
	static const char *const figures[] = { "measured", "mark", "bytes" };
	for (int k = 0; k < 3; k++) {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(t, figures[k]);
		if (v != NULL && !cJSON_IsNull(v) &&
		    (rc = copy_number(out, t, figures[k], 0, 1e13, "validation.tests[].", err)) < 0)
			return rc;
	}
	cJSON_ArrayForEach (h, hints) {
		if (!cJSON_IsString(h) || strlen(h->valuestring) > MAX_TEXT) {
			msg_fmt(err, APP_ERR_LEN, "validation.tests[%d].hints must be strings of at most %d bytes", i,
				MAX_TEXT);
			return APP_EINVAL;
		}
		if (!cJSON_AddItemToArray(oh, cJSON_CreateString(h->valuestring)))
			return APP_ENOMEM;
	}
	return 0;
}

/* The last report of privai-fabric validate: when, the counts, and at
 * most 64 tests.  null (none yet) is kept as null; absent from an older
 * privai-fabric.  0, or an APP_E* code with err. */
static int
validation_clean(cJSON *out, const cJSON *in, char *err)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(in, "validation"), *t;
	const cJSON *tests = cJSON_GetObjectItemCaseSensitive(v, "tests");
	cJSON *o, *a;
	int rc, i = 0;

	if (v == NULL)
		return 0;
	if (cJSON_IsNull(v))
		return cJSON_AddNullToObject(out, "validation") != NULL ? 0 : APP_ENOMEM;
	if (!cJSON_IsObject(v) || !cJSON_IsArray(tests) || cJSON_GetArraySize(tests) > 64) {
		msg_fmt(err, APP_ERR_LEN, "validation must be null or an object with at most 64 tests");
		return APP_EINVAL;
	}
	if ((o = cJSON_AddObjectToObject(out, "validation")) == NULL ||
	    (a = cJSON_AddArrayToObject(o, "tests")) == NULL)
		return APP_ENOMEM;
	if ((rc = copy_number(o, v, "checked_at", 0, 1e11, "validation.", err)) < 0 ||
	    (rc = copy_number(o, v, "passed", 0, 64, "validation.", err)) < 0 ||
	    (rc = copy_number(o, v, "failed", 0, 64, "validation.", err)) < 0 ||
	    (rc = copy_number(o, v, "not_run", 0, 64, "validation.", err)) < 0)
		return rc;
	cJSON_ArrayForEach (t, tests) {
		cJSON *ot = cJSON_CreateObject();
		if (ot == NULL || !cJSON_AddItemToArray(a, ot))
			return APP_ENOMEM;
		if ((rc = validation_test_clean(ot, t, i++, err)) < 0)
			return rc;
	}
	return 0;
}

/* Fabric Manager's and the NCCL topology file's parts of privai-fabric's
 * status, the engines' NCCL settings and the last validation. */
static cJSON *
fabric_clean(const cJSON *in)
{
	char err[APP_ERR_LEN] = "";
	const cJSON *state = cJSON_GetObjectItemCaseSensitive(in, "state");
	const cJSON *fm = cJSON_GetObjectItemCaseSensitive(in, "fabric_manager");
	const cJSON *topo = cJSON_GetObjectItemCaseSensitive(in, "nccl_topology");
	const cJSON *verdict = cJSON_GetObjectItemCaseSensitive(fm, "verdict");
	const cJSON *problems = cJSON_GetObjectItemCaseSensitive(topo, "problems");
	cJSON *out, *ofm, *otopo, *oprob;
	int n;

	if (!cJSON_IsObject(in))
		return part_error("error", "privai-fabric's status must be a JSON object");
	if (cJSON_IsString(state) && strcmp(state->valuestring, "ok") != 0)
		return part_not_ok(in, state->valuestring, "fabric");
	if (!cJSON_IsObject(fm) || !cJSON_IsObject(topo))
		return part_error("error", "fabric: fabric_manager and nccl_topology must be objects");
	if (!cJSON_IsString(verdict) || one_of(verdict->valuestring, fm_verdicts) < 0)
		return part_error("error", "fabric: fabric_manager.verdict is not one privai-fabric gives");
	if (!cJSON_IsArray(problems) || (n = cJSON_GetArraySize(problems)) > MAX_PROBLEMS)
		return part_error("error", "fabric: nccl_topology.problems must be an array of at most %d",
				  MAX_PROBLEMS);
	if ((out = cJSON_CreateObject()) == NULL || cJSON_AddStringToObject(out, "state", "ok") == NULL ||
	    (ofm = cJSON_AddObjectToObject(out, "fabric_manager")) == NULL ||
	    (otopo = cJSON_AddObjectToObject(out, "nccl_topology")) == NULL ||
	    cJSON_AddStringToObject(ofm, "verdict", verdict->valuestring) == NULL ||
	    (oprob = cJSON_AddArrayToObject(otopo, "problems")) == NULL)
		goto nomem;
	if (copy_number(out, in, "checked_at", 0, 1e11, "fabric.", err) < 0 ||
	    copy_bool(ofm, fm, "ready", 1, "fabric_manager.", err) < 0 ||
	    copy_bool(ofm, fm, "needed", 1, "fabric_manager.", err) < 0 ||
	    copy_number(ofm, fm, "nvswitches", 0, 64, "fabric_manager.", err) < 0 ||
	    copy_string(ofm, fm, "problem", MAX_TEXT, 0, "fabric_manager.", err) < 0 ||
	    copy_string(ofm, fm, "version", 64, 0, "fabric_manager.", err) < 0 ||
	    copy_string(ofm, fm, "driver_version", 64, 0, "fabric_manager.", err) < 0 ||
	    copy_string(ofm, fm, "mode", 32, 0, "fabric_manager.", err) < 0 ||
	    copy_string(otopo, topo, "path", 4096, 1, "nccl_topology.", err) < 0 ||
	    copy_bool(otopo, topo, "present", 1, "nccl_topology.", err) < 0 ||
	    copy_bool(otopo, topo, "needed", 1, "nccl_topology.", err) < 0 ||
	    copy_bool(otopo, topo, "valid", 0, "nccl_topology.", err) < 0 || nccl_env_clean(out, in, err) < 0 ||
	    validation_clean(out, in, err) < 0)
		goto bad;
	for (int i = 0; i < n; i++) {
		const cJSON *p = cJSON_GetArrayItem(problems, i);
		if (!cJSON_IsString(p) || strlen(p->valuestring) > MAX_TEXT) {
			msg_fmt(err, APP_ERR_LEN, "nccl_topology.problems[%d] must be a string of at most %d bytes", i,
				MAX_TEXT);
			goto bad;
		}
		if (!cJSON_AddItemToArray(oprob, cJSON_CreateString(p->valuestring)))
			goto nomem;
	}
	return out;
bad:
	if (err[0] != '\0') {
		cJSON_Delete(out);
		return part_error("error", "fabric: %s", err);
	}
nomem:
	cJSON_Delete(out);
	return NULL;
}

/* Wait for fd to be ready for events before the deadline; 1, 0 on timeout, -1. */
static int
wait_fd(int fd, short events, int64_t deadline)
{
	struct pollfd p = { .fd = fd, .events = events };
	int64_t left = deadline - admin_mono_ms();

	if (left <= 0)
		return 0;
	return poll(&p, 1, (int)left);
}

cJSON *
host_fabric_read(const char *path, int timeout_ms)
{
	static const char request[] = "GET /status HTTP/1.0\r\n\r\n";
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int64_t deadline = admin_mono_ms() + timeout_ms;
	size_t got = 0, sent = 0;
	char *buf = NULL, *body;
	cJSON *in, *out = NULL;
	int fd, code;

	if (strlen(path) >= sizeof(sa.sun_path))
		return part_error("error", "the fabric socket's path is longer than %zu bytes",
				  sizeof(sa.sun_path) - 1);
	memcpy(sa.sun_path, path, strlen(path) + 1);
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)) < 0)
		return part_error("error", "socket: %s", strerror(errno));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = errno;
		close(fd);
		if (e == ENOENT || e == ECONNREFUSED)
			return part_error("missing", "privai-fabric is not serving on %s (%s)", path, strerror(e));
		return part_error("error", "%s: %s", path, strerror(e));
	}
	while (sent < sizeof(request) - 1) {
		ssize_t n = send(fd, request + sent, sizeof(request) - 1 - sent, MSG_NOSIGNAL);
		if (n > 0)
			sent += (size_t)n;
		else if (n < 0 && errno == EAGAIN && wait_fd(fd, POLLOUT, deadline) > 0)
			continue;
		else
			goto timeout;
	}
	if ((buf = malloc(MAX_ANSWER_BYTES + 1)) == NULL)
		goto out;
	for (;;) {
		ssize_t n = recv(fd, buf + got, MAX_ANSWER_BYTES - got, 0);
		if (n > 0 && (got += (size_t)n) < MAX_ANSWER_BYTES)
			continue;
		if (n == 0)
			break;
		if (n > 0) {
			out = part_error("error", "privai-fabric's answer is longer than %d bytes", MAX_ANSWER_BYTES);
			goto out;
		}
		if (errno == EINTR || (errno == EAGAIN && wait_fd(fd, POLLIN, deadline) > 0))
			continue;
		goto timeout;
	}
	buf[got] = '\0';
	if (sscanf(buf, "HTTP/1.%*1[01] %3d", &code) != 1 || (body = strstr(buf, "\r\n\r\n")) == NULL) {
		out = part_error("error", "privai-fabric's answer on %s is not HTTP", path);
		goto out;
	}
	if (code != 200) {
		out = part_error("error", "privai-fabric answered %d on %s", code, path);
		goto out;
	}
	body += 4;
	if ((in = cJSON_ParseWithLength(body, got - (size_t)(body - buf))) == NULL)
		out = part_error("error", "privai-fabric's status on %s is not JSON", path);
	else
		out = fabric_clean(in);
	cJSON_Delete(in);
	goto out;
timeout:
	out = part_error("error", "no answer from privai-fabric on %s within %d ms", path, timeout_ms);
out:
	close(fd);
	free(buf);
	return out;
}

/* {"preflight": p, "fabric": f}, taking both (NULL when out of memory) */
static cJSON *
host_object(cJSON *p, cJSON *f)
{
	cJSON *h = cJSON_CreateObject();

	if (h == NULL || p == NULL || f == NULL) {
		cJSON_Delete(h);
		cJSON_Delete(p);
		cJSON_Delete(f);
		return NULL;
	}
	cJSON_AddItemToObject(h, "preflight", p);
	cJSON_AddItemToObject(h, "fabric", f);
	return h;
}

cJSON *
host_health_read(const char *preflight_file, const char *fabric_socket)
{
	return host_object(host_preflight_read(preflight_file), host_fabric_read(fabric_socket, 2000));
}

cJSON *
host_health_clean(const cJSON *host)
{
	if (!cJSON_IsObject(host))
		return host_object(part_error("error", "the node's host report must be a JSON object"),
				   part_error("error", "the node's host report must be a JSON object"));
	return host_object(preflight_clean(cJSON_GetObjectItemCaseSensitive(host, "preflight"), -1),
			   fabric_clean(cJSON_GetObjectItemCaseSensitive(host, "fabric")));
}
