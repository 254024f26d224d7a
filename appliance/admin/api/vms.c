/*
 * Workload VMs over HTTP (vm/vm.h): defined from GPU + NIC pairs that
 * pass the passthrough checks, started, stopped, undefined, through
 * libvirt (--libvirt-uri).  The store keeps what was asked and the
 * devices taken; libvirt answers for the live state.
 */
#include <errno.h>
#include <limits.h>
#include <sodium.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "status.h"
#include "strfmt.h"
#include "admin.h"
#include "http/httpd.h"
#include "log.h"
#include "auth/auth.h"
#include "cluster/nodes.h"
#include "store/db.h"
#include "store/rows.h"
#include "vm/vm.h"

#define VM_COLUMNS                                                                                                     \
	"SELECT id, name, vcpus, memory_gib, hugepages, image, seed, network, devices, numa_node, cpuset, "            \
	"mmio_window_gib, uuid, state, created_by, created_at, updated_at FROM vms"
#define VM_MAX_GPUS 16

/* The live state from libvirt replaces the stored one; libvirt_error
 * says why when libvirt could not be asked. */
static void
add_live_state(struct req *r, cJSON *vm)
{
	char err[VM_ERR_LEN] = "";
	const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(vm, "name"));
	const char *state = vm_state(r->a->cfg.libvirt_uri, name != NULL ? name : "", err);

	if (strcmp(state, "unknown") == 0) {
		cJSON_AddStringToObject(vm, "libvirt_error", err);
		return;
	}
	cJSON_ReplaceItemInObject(vm, "state", cJSON_CreateString(state));
}

static void
h_list(struct req *r)
{
	sqlite3_stmt *st = rows_prepare(r->a->db, VM_COLUMNS " ORDER BY id", 0, NULL);
	cJSON *rows, *vm, *o;

	if (st == NULL || (rows = rows_json(st)) == NULL) { /* rows_json finalizes st */
		reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
		return;
	}
	cJSON_ArrayForEach (vm, rows)
		add_live_state(r, vm);
	o = cJSON_CreateObject();
	cJSON_AddItemToObject(o, "data", rows);
	cJSON_AddStringToObject(o, "libvirt_uri", r->a->cfg.libvirt_uri);
	reply_json(r, 200, o);
}

/* The row of id, or NULL after replying (404, 500). */
static cJSON *
vm_row(struct req *r, int64_t id)
{
	sqlite3_stmt *st = rows_prepare(r->a->db, VM_COLUMNS " WHERE id = ?1", 1, &id);
	int found = 0;
	cJSON *vm;

	if (st == NULL) {
		reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
		return NULL;
	}
	vm = row_json(st, &found); /* finalizes st */
	if (vm == NULL || !found) {
		cJSON_Delete(vm);
		reply_error(r, 404, "not_found", NULL, "no VM %lld", (long long)id);
		return NULL;
	}
	return vm;
}

static void
h_get(struct req *r)
{
	int64_t id = arg_id(r, 0, "vm");
	cJSON *vm;
	char err[VM_ERR_LEN] = "";

	if (id < 0 || (vm = vm_row(r, id)) == NULL)
		return;
	add_live_state(r, vm);
	char *xml = vm_xml_of(r->a->cfg.libvirt_uri, cJSON_GetStringValue(cJSON_GetObjectItem(vm, "name")), err);
	if (xml != NULL)
		cJSON_AddStringToObject(vm, "domain_xml", xml);
	else
		cJSON_AddNullToObject(vm, "domain_xml");
	free(xml);
	reply_json(r, 200, vm);
}

/* Letters, digits, '.', '_', '-', not starting with '.' or '-': a libvirt
 * domain name that is also safe in a path. */
static int
name_ok(const char *s)
{
	size_t n = strlen(s);

	return n >= 1 && n <= 63 && s[0] != '.' && s[0] != '-' &&
	       strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == n;
}

/* An absolute path to a regular file under --vm-image-dir, without
 * characters a domain's XML would trip on.  Under that directory only:
 * libvirt hands the file to qemu as the guest's disk, so any other path
 * (the store, /etc/shadow) would let whoever defines a VM read it. */
static int
file_ok(struct req *r, const char *field, const char *path)
{
	char real[PATH_MAX], root[PATH_MAX];
	struct stat sb;
	size_t n;

	if (path[0] != '/' || strpbrk(path, "'\"<>&\\\n") != NULL) {
		reply_error(r, 422, "invalid_field", field, "%s must be an absolute path without quotes, <, > or &",
			    field);
		return -1;
	}
	if (realpath(path, real) == NULL || stat(real, &sb) != 0 || !S_ISREG(sb.st_mode)) {
		reply_error(r, 422, "invalid_field", field, "%s: no such file (%.200s)", field, path);
		return -1;
	}
	if (realpath(r->a->cfg.vm_image_dir, root) == NULL || strncmp(real, root, n = strlen(root)) != 0 ||
	    real[n] != '/') {
		reply_error(r, 422, "invalid_field", field, "%s must be a file under %s (--vm-image-dir), not %.200s",
			    field, r->a->cfg.vm_image_dir, real);
		return -1;
	}
	return 0;
}

/* DIR/NAME.console.log, the directory made if need be; -1 after
 * replying when it cannot be. */
static int
console_path(struct req *r, const char *name, char *out, size_t size)
{
	const char *dir = r->a->cfg.vm_dir;

	/* 0751: qemu's user (libvirt hands it the files) may pass, not list */
	if (mkdir(dir, 0751) != 0 && errno != EEXIST) {
		reply_error(r, 500, "internal", NULL, "cannot make %s for the VM's console: %s", dir, strerror(errno));
		return -1;
	}
	if (str_fmt(out, size, "%s/%s.console.log", dir, name) != APP_OK) {
		reply_error(r, 500, "internal", NULL, "the console directory's path is too long");
		return -1;
	}
	return 0;
}

/* The devices other VMs hold: BDFs, and the VM holding each.  -1 on a
 * database error. */
static int
held_devices(sqlite3 *db, char (*bdf)[16], char (*by)[64], int max)
{
	sqlite3_stmt *st;
	int n = 0;

	if (sqlite3_prepare_v2(db,
			       "SELECT json_extract(d.value, '$.bdf'), v.name "
			       "FROM vms v, json_each(v.devices) d ORDER BY v.id",
			       -1, &st, NULL) != SQLITE_OK)
		return -1;
	while (n < max && sqlite3_step(st) == SQLITE_ROW) {
		snprintf(bdf[n], 16, "%s", (const char *)sqlite3_column_text(st, 0));
		snprintf(by[n], 64, "%s", (const char *)sqlite3_column_text(st, 1));
		n++;
	}
	sqlite3_finalize(st);
	return n;
}

static cJSON *
devices_json(const struct vm_spec *s)
{
	cJSON *a = cJSON_CreateArray();

	for (int i = 0; i < s->n_devices; i++) {
		cJSON *d = cJSON_CreateObject();
		cJSON_AddStringToObject(d, "bdf", s->dev[i].bdf);
		cJSON_AddStringToObject(d, "role", s->dev[i].role);
		cJSON_AddStringToObject(d, "name", s->dev[i].name);
		cJSON_AddItemToArray(a, d);
	}
	return a;
}

/* The NoCloud seed that makes the guest, booted from the privai image, a
 * member of this appliance: a join token of its own (a day to use it),
 * this console's URL and TLS pin (docs/cloud-init.md).  Sets s->seed; -1
 * after replying. */
static int
join_seed(struct req *r, struct vm_spec *s)
{
	char token[AUTH_SECRET_LEN], err[VM_ERR_LEN], user_data[1024];
	int64_t id;

	if (join_token_issue(r->a->db, r->now, 24 * 3600, token, &id, err) != APP_OK) {
		reply_error(r, 500, "internal", NULL, "%s", err);
		return -1;
	}
	snprintf(user_data, sizeof(user_data),
		 "#cloud-config\n# privai workload VM %s: joins %s as a member at first boot\nhostname: %s\nprivai:\n"
		 "  role: member\n  join_url: %s\n  join_token: %s\n%s%s%s",
		 s->name, r->a->cfg.advertise_url, s->name, r->a->cfg.advertise_url, token,
		 r->a->tls_pin[0] ? "  join_pin: " : "", r->a->tls_pin, r->a->tls_pin[0] ? "\n" : "");
	int rc = vm_seed_write(r->a->cfg.vm_dir, s->name, user_data, s->seed, sizeof(s->seed), err);
	sodium_memzero(token, sizeof(token));
	sodium_memzero(user_data, sizeof(user_data));
	if (rc < 0)
		reply_error(r, 500, "internal", NULL, "%s", err);
	return rc;
}

static int
insert_vm(struct req *r, const struct vm_spec *s, const char *uuid, int64_t *id)
{
	sqlite3_stmt *st;
	cJSON *devs = devices_json(s);
	char *devtext = cJSON_PrintUnformatted(devs);
	int rc = -1;

	cJSON_Delete(devs);
	if (devtext != NULL &&
	    sqlite3_prepare_v2(r->a->db,
			       "INSERT INTO vms (name, vcpus, memory_gib, hugepages, image, seed, network, devices, "
			       "numa_node, cpuset, mmio_window_gib, uuid, state, created_by, created_at, updated_at) "
			       "VALUES (?1, ?2, ?3, ?4, ?5, nullif(?6, ''), nullif(?7, ''), ?8, ?9, nullif(?10, ''), "
			       "?11, ?12, 'defined', ?13, ?14, ?14)",
			       -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_text(st, 1, s->name, -1, SQLITE_STATIC);
		sqlite3_bind_int(st, 2, s->vcpus);
		sqlite3_bind_int(st, 3, s->memory_gib);
		sqlite3_bind_int(st, 4, s->hugepages);
		sqlite3_bind_text(st, 5, s->image, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 6, s->seed, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 7, s->network, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 8, devtext, -1, SQLITE_STATIC);
		if (s->numa_node >= 0)
			sqlite3_bind_int(st, 9, s->numa_node);
		sqlite3_bind_text(st, 10, s->cpuset, -1, SQLITE_STATIC);
		sqlite3_bind_int(st, 11, s->mmio_window_gib);
		sqlite3_bind_text(st, 12, uuid, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 13, r->who.name, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 14, r->now);
		char err[APP_ERR_LEN];
		rc = db_write(r->a->db, st, err) == APP_OK ? 0 : -1;
		*id = sqlite3_last_insert_rowid(r->a->db);
	}
	free(devtext);
	return rc;
}

static void
h_define(struct req *r)
{
	static const char *const known[] = { "name", "gpus",    "vcpus",     "memory_gib", "image",
					     "seed", "network", "hugepages", "join",       NULL };
	static char held[256][16], by[256][64]; /* static: off the stack; handlers run one at a time (db_mu) */
	struct vm_spec *s = calloc(1, sizeof(*s));
	struct vm_refusal why;
	const char *name, *image, *seed, *network, *gpus[VM_MAX_GPUS];
	int64_t vcpus, mem, id = 0;
	char uuid[64] = "", err[VM_ERR_LEN];
	cJSON *j = NULL, *g, *list;
	int n_gpus = 0, n_held, join = 0;

	if (s == NULL) {
		reply_error(r, 500, "internal", NULL, "out of memory");
		return;
	}
	if ((j = body_object(r)) == NULL || fields_known(r, j, known) < 0 ||
	    (name = field_str(r, j, "name", 1, 63, NULL)) == NULL ||
	    field_int(r, j, "vcpus", 1, 1, 512, 0, &vcpus) < 0 ||
	    field_int(r, j, "memory_gib", 1, 1, 16384, 0, &mem) < 0 ||
	    (image = field_str(r, j, "image", 1, 1000, NULL)) == NULL ||
	    (seed = field_str(r, j, "seed", 0, 1000, "")) == NULL ||
	    (network = field_str(r, j, "network", 0, 63, "")) == NULL ||
	    field_bool(r, j, "hugepages", 1, &s->hugepages) < 0 || field_bool(r, j, "join", 0, &join) < 0)
		goto out;
	if (join && r->who.role < ROLE_ADMIN) {
		/* a seed that joins carries a join token, which only admins issue */
		reply_error(r, 403, "forbidden", "join",
			    "a VM that joins the cluster takes an admin: its seed holds a "
			    "join token");
		goto out;
	}
	if (join && seed[0] != '\0') {
		reply_error(r, 422, "invalid_field", "join", "join makes the VM's seed: give join or seed, not both");
		goto out;
	}
	if (!name_ok(name)) {
		reply_error(r, 422, "invalid_field", "name",
			    "name: 1-63 of letters, digits, '.', '_', '-', not starting with '.' or '-'");
		goto out;
	}
	list = cJSON_GetObjectItemCaseSensitive(j, "gpus");
	if (list != NULL && (!cJSON_IsArray(list) || cJSON_GetArraySize(list) > VM_MAX_GPUS)) {
		reply_error(r, 422, "invalid_field", "gpus",
			    "gpus is a list of 0-%d GPU PCI addresses (0000:18:00.0); none: a CPU VM", VM_MAX_GPUS);
		goto out;
	}
	cJSON_ArrayForEach (g, list) {
		if (!cJSON_IsString(g) || strlen(g->valuestring) != 12) {
			reply_error(r, 422, "invalid_field", "gpus", "each GPU is a PCI address such as 0000:18:00.0");
			goto out;
		}
		gpus[n_gpus++] = g->valuestring;
	}
	if (file_ok(r, "image", image) < 0 || (seed[0] != '\0' && file_ok(r, "seed", seed) < 0))
		goto out;
	if (network[0] != '\0' && !name_ok(network)) {
		reply_error(r, 422, "invalid_field", "network",
			    "network names a libvirt network: letters, digits, '._-'");
		goto out;
	}
	sqlite3_stmt *st;
	if (sqlite3_prepare_v2(r->a->db, "SELECT 1 FROM vms WHERE name = ?1", -1, &st, NULL) != SQLITE_OK) {
		reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
		goto out;
	}
	sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
	int taken = sqlite3_step(st) == SQLITE_ROW;
	sqlite3_finalize(st);
	if (taken) {
		reply_error(r, 409, "name_taken", "name", "a VM named '%s' exists", name);
		goto out;
	}
	snprintf(s->name, sizeof(s->name), "%s", name);
	snprintf(s->image, sizeof(s->image), "%s", image);
	snprintf(s->seed, sizeof(s->seed), "%s", seed);
	snprintf(s->network, sizeof(s->network), "%s", network);
	s->vcpus = (int)vcpus;
	s->memory_gib = (int)mem;
	if (console_path(r, s->name, s->console_log, sizeof(s->console_log)) < 0)
		goto out;
	if ((n_held = held_devices(r->a->db, held, by, 256)) < 0) {
		reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
		goto out;
	}
	if (vm_devices_pick(r->a->cfg.sys_root, gpus, n_gpus, (const char(*)[16])held, (const char(*)[64])by, n_held, s,
			    &why) < 0) {
		reply_error(r, (unsigned)why.status, why.code, why.status == 500 ? NULL : "gpus", "%s", why.message);
		goto out;
	}
	if (join && join_seed(r, s) < 0)
		goto out;
	if (vm_define(r->a->cfg.libvirt_uri, s, uuid, sizeof(uuid), err) < 0) {
		reply_error(r, 502, "libvirt", NULL, "%s", err);
		if (join)
			(void)unlink(s->seed);
		goto out;
	}
	if (insert_vm(r, s, uuid, &id) < 0) {
		char lerr[VM_ERR_LEN];
		(void)vm_undefine(r->a->cfg.libvirt_uri, s->name, lerr); /* nothing half made stays behind */
		reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
		goto out;
	}
	cJSON *d = cJSON_CreateObject();
	cJSON_AddItemToObject(d, "devices", devices_json(s));
	cJSON_AddNumberToObject(d, "mmio_window_gib", s->mmio_window_gib);
	cJSON_AddBoolToObject(d, "join", join);
	req_audit(r, "vm.define", s->name, "ok", d);
	cJSON *vm = vm_row(r, id);
	if (vm != NULL)
		reply_json(r, 201, vm);
out:
	cJSON_Delete(j);
	free(s);
}

/* The VM of the path's id and its name, or -1 after replying. */
static int
vm_name(struct req *r, char *name, size_t size)
{
	int64_t id = arg_id(r, 0, "vm");
	cJSON *vm;

	if (id < 0 || (vm = vm_row(r, id)) == NULL)
		return -1;
	snprintf(name, size, "%s", cJSON_GetStringValue(cJSON_GetObjectItem(vm, "name")));
	cJSON_Delete(vm);
	return 0;
}

/* The state an operation left (libvirt's live one is asked on reads):
 * a write that fails leaves the old one, which reads then correct. */
static void
set_state(struct req *r, const char *name, const char *state)
{
	sqlite3_stmt *st;
	char err[APP_ERR_LEN];

	if (sqlite3_prepare_v2(r->a->db, "UPDATE vms SET state = ?1, updated_at = ?2 WHERE name = ?3", -1, &st, NULL) !=
	    SQLITE_OK)
		return;
	sqlite3_bind_text(st, 1, state, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, r->now);
	sqlite3_bind_text(st, 3, name, -1, SQLITE_STATIC);
	if (db_write(r->a->db, st, err) != APP_OK)
		log_warn("VM %s: its state '%s' was not stored: %s", name, state, err);
}

static void
h_start(struct req *r)
{
	char name[64], err[VM_ERR_LEN];

	if (vm_name(r, name, sizeof(name)) < 0)
		return;
	if (strcmp(vm_state(r->a->cfg.libvirt_uri, name, err), "running") == 0) {
		reply_error(r, 409, "running", NULL, "VM '%s' is running already", name);
		return;
	}
	if (vm_start(r->a->cfg.libvirt_uri, name, err) < 0) {
		reply_error(r, 502, "libvirt", NULL, "%s", err);
		return;
	}
	set_state(r, name, "running");
	req_audit(r, "vm.start", name, "ok", NULL);
	reply_empty(r, 204);
}

static void
h_stop(struct req *r)
{
	static const char *const known[] = { "force", NULL };
	char name[64], err[VM_ERR_LEN];
	cJSON *j = NULL;
	int force = 0;

	if (r->len > 0 &&
	    ((j = body_object(r)) == NULL || fields_known(r, j, known) < 0 || field_bool(r, j, "force", 0, &force) < 0))
		goto out;
	if (vm_name(r, name, sizeof(name)) < 0)
		goto out;
	if (strcmp(vm_state(r->a->cfg.libvirt_uri, name, err), "running") != 0) {
		reply_error(r, 409, "not_running", NULL, "VM '%s' is not running", name);
		goto out;
	}
	if (vm_stop(r->a->cfg.libvirt_uri, name, force, err) < 0) {
		reply_error(r, 502, "libvirt", NULL, "%s", err);
		goto out;
	}
	set_state(r, name, force ? "stopped" : "stopping");
	req_audit(r, force ? "vm.poweroff" : "vm.stop", name, "ok", NULL);
	reply_empty(r, 204);
out:
	cJSON_Delete(j);
}

static void
h_delete(struct req *r)
{
	char name[64], err[VM_ERR_LEN] = "";
	const char *state;
	sqlite3_stmt *st;

	if (vm_name(r, name, sizeof(name)) < 0)
		return;
	state = vm_state(r->a->cfg.libvirt_uri, name, err);
	if (strcmp(state, "running") == 0 || strcmp(state, "paused") == 0) {
		reply_error(r, 409, "running", NULL, "VM '%s' is %s: stop it first", name, state);
		return;
	}
	if (strcmp(state, "unknown") == 0) {
		reply_error(r, 502, "libvirt", NULL, "%s", err);
		return;
	}
	if (strcmp(state, "missing") != 0 && vm_undefine(r->a->cfg.libvirt_uri, name, err) < 0) {
		reply_error(r, 502, "libvirt", NULL, "%s", err);
		return;
	}
	if (sqlite3_prepare_v2(r->a->db, "DELETE FROM vms WHERE name = ?1", -1, &st, NULL) != SQLITE_OK) {
		reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
		return;
	}
	sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
	char werr[APP_ERR_LEN];
	if (db_write(r->a->db, st, werr) != APP_OK) {
		reply_error(r, 500, "internal", NULL, "VM '%s' was undefined in libvirt, but its row stays: %s", name,
			    werr);
		return;
	}
	/* a seed it made holds a join token: it goes with the VM */
	char seed[1100];
	if (str_fmt(seed, sizeof(seed), "%s/%s-seed.iso", r->a->cfg.vm_dir, name) == APP_OK)
		(void)unlink(seed);
	cJSON *d = cJSON_CreateObject();
	if (strcmp(state, "missing") == 0)
		cJSON_AddStringToObject(d, "note", "libvirt no longer had it");
	req_audit(r, "vm.undefine", name, "ok", d);
	reply_empty(r, 204);
}

/* The last 64 KiB of the VM's serial console, as text. */
static void
h_console(struct req *r)
{
	char name[64], path[1100];
	struct stat sb;
	int fd;

	if (vm_name(r, name, sizeof(name)) < 0)
		return;
	if (str_fmt(path, sizeof(path), "%s/%s.console.log", r->a->cfg.vm_dir, name) != APP_OK ||
	    (fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0) {
		reply_error(r, 404, "not_found", NULL, "VM '%s' has written no console output yet", name);
		return;
	}
	off_t from = fstat(fd, &sb) == 0 && sb.st_size > 65536 ? sb.st_size - 65536 : 0;
	char *text = malloc(65536 + 1);
	ssize_t n = text != NULL ? pread(fd, text, 65536, from) : -1;
	close(fd);
	if (n < 0) {
		free(text);
		reply_error(r, 500, "internal", NULL, "reading %s failed", path);
		return;
	}
	for (ssize_t i = 0; i < n; i++) /* a NUL would end the text early */
		text[i] = text[i] == '\0' ? ' ' : text[i];
	text[n] = '\0';
	reply_text(r, 200, "text/plain; charset=utf-8", text);
}

const struct route api_vms_routes[] = {
	{ "GET", "/api/v1/vms", ROLE_VIEWER, 0, h_list, NULL, NULL },
	{ "POST", "/api/v1/vms", ROLE_OPERATOR, 0, h_define, NULL, "vm.define" },
	{ "GET", "/api/v1/vms/{id}", ROLE_VIEWER, 0, h_get, NULL, NULL },
	{ "GET", "/api/v1/vms/{id}/console", ROLE_VIEWER, 0, h_console, NULL, NULL },
	{ "POST", "/api/v1/vms/{id}/start", ROLE_OPERATOR, 0, h_start, NULL, "vm.start" },
	{ "POST", "/api/v1/vms/{id}/stop", ROLE_OPERATOR, 0, h_stop, NULL, "vm.stop" },
	{ "DELETE", "/api/v1/vms/{id}", ROLE_OPERATOR, 0, h_delete, NULL, "vm.undefine" },
	{ NULL, NULL, 0, 0, NULL, NULL, NULL },
};
