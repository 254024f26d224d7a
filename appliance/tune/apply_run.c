/* Recording, writing and undoing a plan; the record is a JSON state file. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "status.h"
#include "strfmt.h"
#include "apply.h"
#include "hostfs.h"

#define MAX_DIRS 32

static const char *const kind_names[] = { "attr", "selector", "file", "link" };

/* Only these trees are ever written, whatever a state file says; a
 * directory apply created may also be one of their parents. */
static int
path_allowed(const char *path, int dir)
{
	static const char *const prefixes[] = { "/sys/devices/system/cpu/",
						"/sys/kernel/mm/transparent_hugepage/",
						"/proc/sys/vm/",
						"/proc/sys/kernel/",
						"/proc/irq/",
						"/etc/systemd/",
						"/etc/modules-load.d/",
						"/var/lib/privai/",
						NULL };
	size_t l = strlen(path);

	if (path[0] != '/' || l < 2 || strstr(path, "/../") != NULL || strstr(path, "/./") != NULL ||
	    strstr(path, "//") != NULL || (l >= 3 && strcmp(path + l - 3, "/..") == 0) || path[l - 1] == '/')
		return 0;
	for (int i = 0; prefixes[i] != NULL; i++)
		if (strncmp(path, prefixes[i], strlen(prefixes[i])) == 0 ||
		    (dir && strncmp(prefixes[i], path, l) == 0 && prefixes[i][l] == '/'))
			return 1;
	return 0;
}

struct state {
	struct plan recorded;
	int n_dirs;
	char dirs[MAX_DIRS][256]; /* created by apply, in creation order */
	char profile[32];
};

static int
state_load(const char *root, struct state *s, char *err, size_t errsize)
{
	char *text = hostfs_read_text(root, TUNE_STATE_FILE, 8 << 20, NULL);
	cJSON *o, *list, *it;

	memset(s, 0, sizeof(*s));
	if (text == NULL)
		return hostfs_exists(root, TUNE_STATE_FILE)
			       ? (snprintf(err, errsize, "%s cannot be read", TUNE_STATE_FILE), -1)
			       : 0;
	o = cJSON_Parse(text);
	free(text);
	if (o == NULL || !cJSON_IsArray(list = cJSON_GetObjectItem(o, "changes"))) {
		snprintf(err, errsize,
			 "%s is not a privai-tune state file (no changes list); move it aside to apply afresh",
			 TUNE_STATE_FILE);
		cJSON_Delete(o);
		return APP_EFORMAT;
	}
	if (cJSON_IsString(it = cJSON_GetObjectItem(o, "profile")))
		snprintf(s->profile, sizeof(s->profile), "%s", it->valuestring);
	cJSON_ArrayForEach (it, list) {
		const cJSON *kind = cJSON_GetObjectItem(it, "kind"), *path = cJSON_GetObjectItem(it, "path");
		const cJSON *old = cJSON_GetObjectItem(it, "old"), *what = cJSON_GetObjectItem(it, "what");
		const cJSON *existed = cJSON_GetObjectItem(it, "existed");
		struct change *c;
		int k;
		for (k = 0; k < 4; k++)
			if (cJSON_IsString(kind) && strcmp(kind->valuestring, kind_names[k]) == 0)
				break;
		if (k == 4 || !cJSON_IsString(path) || !cJSON_IsString(old) ||
		    strlen(path->valuestring) >= sizeof(c->path) || strlen(old->valuestring) >= sizeof(c->old) ||
		    !path_allowed(path->valuestring, 0)) {
			snprintf(err, errsize, "%s: change %d is malformed or names a path apply never writes",
				 TUNE_STATE_FILE, s->recorded.n + 1);
			cJSON_Delete(o);
			plan_free(&s->recorded);
			return APP_EFORMAT;
		}
		if ((c = plan_add(&s->recorded)) == NULL) {
			snprintf(err, errsize, "out of memory reading %s", TUNE_STATE_FILE);
			cJSON_Delete(o);
			plan_free(&s->recorded);
			return APP_EFORMAT;
		}
		c->kind = (enum change_kind)k;
		snprintf(c->path, sizeof(c->path), "%s", path->valuestring);
		snprintf(c->old, sizeof(c->old), "%s", old->valuestring);
		snprintf(c->what, sizeof(c->what), "%s", cJSON_IsString(what) ? what->valuestring : "");
		c->existed = cJSON_IsTrue(existed);
	}
	cJSON_ArrayForEach (it, cJSON_GetObjectItem(o, "created_dirs")) {
		if (!cJSON_IsString(it) || strlen(it->valuestring) >= 256 || !path_allowed(it->valuestring, 1) ||
		    s->n_dirs == MAX_DIRS)
			continue;
		snprintf(s->dirs[s->n_dirs++], 256, "%s", it->valuestring);
	}
	cJSON_Delete(o);
	return 0;
}

static int
state_save(const char *root, const struct state *s, char *err, size_t errsize)
{
	cJSON *o = cJSON_CreateObject(), *list = cJSON_AddArrayToObject(o, "changes"),
	      *dirs = cJSON_AddArrayToObject(o, "created_dirs");
	char *text = NULL;
	int rc = APP_EIO;

	if (o == NULL || list == NULL || dirs == NULL)
		goto out;
	cJSON_AddNumberToObject(o, "version", 1);
	cJSON_AddStringToObject(o, "profile", s->profile);
	for (int i = 0; i < s->recorded.n; i++) {
		const struct change *c = &s->recorded.c[i];
		cJSON *j = cJSON_CreateObject();
		if (j == NULL || !cJSON_AddItemToArray(list, j))
			goto out;
		cJSON_AddStringToObject(j, "kind", kind_names[c->kind]);
		cJSON_AddStringToObject(j, "what", c->what);
		cJSON_AddStringToObject(j, "path", c->path);
		cJSON_AddStringToObject(j, "old", c->old);
		cJSON_AddBoolToObject(j, "existed", c->existed);
	}
	for (int i = 0; i < s->n_dirs; i++)
		cJSON_AddItemToArray(dirs, cJSON_CreateString(s->dirs[i]));
	if ((text = cJSON_Print(o)) == NULL)
		goto out;
	rc = hostfs_write(root, TUNE_STATE_FILE, text, strlen(text), 1);
	if (rc < 0)
		snprintf(err, errsize, "cannot record the old values in %s: %s; nothing was changed", TUNE_STATE_FILE,
			 strerror(errno));
out:
	if (rc < 0 && text == NULL)
		snprintf(err, errsize, "out of memory recording the old values");
	free(text);
	cJSON_Delete(o);
	return rc;
}

/* The parents of path that do not exist yet, outermost first, into s. */
static int
note_missing_dirs(const char *root, const char *path, struct state *s)
{
	char dir[256];

	for (char *slash = strchr(strcpy(dir, path) + 1, '/'); slash != NULL; slash = strchr(slash + 1, '/')) {
		int seen = 0;
		*slash = '\0';
		for (int i = 0; i < s->n_dirs && !seen; i++)
			seen = strcmp(s->dirs[i], dir) == 0;
		if (!seen && !hostfs_exists(root, dir)) {
			if (s->n_dirs == MAX_DIRS)
				return APP_EIO;
			snprintf(s->dirs[s->n_dirs++], 256, "%s", dir);
		}
		*slash = '/';
	}
	return 0;
}

static int
make_dirs(const char *root, const struct state *s)
{
	char full[4096];

	for (int i = 0; i < s->n_dirs; i++)
		if (hostfs_path(root, s->dirs[i], full, sizeof(full)) < 0 || (mkdir(full, 0755) < 0 && errno != EEXIST))
			return APP_EIO;
	return 0;
}

/* "always [madvise] never" with the brackets moved to word. */
static void
reselect(const char *list, const char *word, char *out, size_t size)
{
	char copy[256], *tok, *save = NULL;
	size_t n = 0;

	snprintf(copy, sizeof(copy), "%s", list);
	out[0] = '\0';
	for (tok = strtok_r(copy, " ", &save); tok != NULL; tok = strtok_r(NULL, " ", &save)) {
		size_t l = strlen(tok);
		if (tok[0] == '[' && l > 1 && tok[l - 1] == ']') {
			tok[l - 1] = '\0';
			tok++;
		}
		n += (size_t)snprintf(out + n, n < size ? size - n : 0,
				      n ? (strcmp(tok, word) == 0 ? " [%s]" : " %s")
					: (strcmp(tok, word) == 0 ? "[%s]" : "%s"),
				      tok);
	}
}

static int
write_line(const char *root, const char *path, const char *value)
{
	char buf[300];
	int n = snprintf(buf, sizeof(buf), "%s\n", value);

	return hostfs_write(root, path, buf, (size_t)n, 0);
}

/* The kernel takes the bare word and shows the list; a copy of sysfs (a
 * fixture tree) is a plain file, which is given the list as the kernel
 * would show it, so it reads back the same way. */
static int
write_selector(const char *root, const char *path, const char *word, const char *list_before)
{
	char back[256], list[256];

	if (write_line(root, path, word) < 0)
		return APP_EIO;
	if (hostfs_read_line(root, path, back, sizeof(back)) == 0 && strcmp(back, word) == 0) {
		reselect(list_before, word, list, sizeof(list));
		return write_line(root, path, list);
	}
	return 0;
}

static int
apply_one(const char *root, const struct change *c, const char *recorded_old)
{
	char full[4096];

	switch (c->kind) {
	case CHANGE_ATTR:
		return write_line(root, c->path, c->new);
	case CHANGE_SELECTOR:
		return write_selector(root, c->path, c->new, recorded_old);
	case CHANGE_FILE:
		return hostfs_write(root, c->path, c->new, strlen(c->new), 1);
	case CHANGE_LINK:
		if (hostfs_path(root, c->path, full, sizeof(full)) < 0)
			return APP_EIO;
		return symlink(c->new, full);
	}
	return APP_EIO;
}

int
apply_run(const struct tune_host *h, struct plan *p, FILE *out, char *err, size_t errsize)
{
	struct state s;
	int failed = 0;

	if (state_load(h->root, &s, err, errsize) < 0)
		return APP_EIO;
	snprintf(s.profile, sizeof(s.profile), "%s", h->profile->name);
	if (note_missing_dirs(h->root, TUNE_STATE_FILE, &s) < 0)
		goto too_deep;
	/* record first: a value is written only once its old one is on disk */
	for (int i = 0; i < p->n; i++) {
		const struct change *c = &p->c[i];
		int known = 0;
		if (c->done)
			continue;
		for (int j = 0; j < s.recorded.n && !known; j++)
			known = strcmp(s.recorded.c[j].path, c->path) == 0;
		if (!known) {
			struct change *rec = plan_add(&s.recorded);
			if (rec == NULL) {
				snprintf(err, errsize, "out of memory recording the old values");
				plan_free(&s.recorded);
				return APP_ENOMEM;
			}
			*rec = *c;
		}
		if ((c->kind == CHANGE_FILE || c->kind == CHANGE_LINK) && note_missing_dirs(h->root, c->path, &s) < 0)
			goto too_deep;
	}
	if (make_dirs(h->root, &s) < 0 || state_save(h->root, &s, err, errsize) < 0) {
		if (err[0] == '\0')
			snprintf(err, errsize, "cannot create the directories for %s: %s", TUNE_STATE_FILE,
				 strerror(errno));
		plan_free(&s.recorded);
		return APP_EIO;
	}
	for (int i = 0; i < p->n; i++) {
		struct change *c = &p->c[i];
		const char *old = c->old;
		if (c->done)
			continue;
		for (int j = 0; j < s.recorded.n; j++)
			if (strcmp(s.recorded.c[j].path, c->path) == 0)
				old = s.recorded.c[j].old;
		if (apply_one(h->root, c, old) < 0) {
			msg_fmt(c->note, sizeof(c->note), "failed: %s: %s", c->path, strerror(errno));
			fprintf(out, "  %-24s %s\n", c->what, c->note);
			failed++;
		}
	}
	plan_free(&s.recorded);
	if (failed) {
		snprintf(err, errsize, "%d change%s failed (recorded: revert undoes the rest)", failed,
			 failed == 1 ? "" : "s");
		return APP_EIO;
	}
	return 0;
too_deep:
	snprintf(err, errsize, "more than %d directories to create", MAX_DIRS);
	plan_free(&s.recorded);
	return APP_EIO;
}

int
apply_revert(const char *root, FILE *out, char *err, size_t errsize)
{
	struct state s;
	int failed = 0;

	if (state_load(root, &s, err, errsize) < 0)
		return APP_EIO;
	if (!hostfs_exists(root, TUNE_STATE_FILE)) {
		fprintf(out, "nothing to revert: %s does not exist\n", TUNE_STATE_FILE);
		return 0;
	}
	for (int i = s.recorded.n - 1; i >= 0; i--) {
		const struct change *c = &s.recorded.c[i];
		char full[4096], sel[64];
		int rc = 0;
		switch (c->kind) {
		case CHANGE_ATTR:
			rc = write_line(root, c->path, c->old);
			break;
		case CHANGE_SELECTOR:
			rc = thp_selected(c->old, sel, sizeof(sel)) < 0 ? -1
									: write_selector(root, c->path, sel, c->old);
			break;
		case CHANGE_FILE:
		case CHANGE_LINK:
			if (c->existed && c->kind == CHANGE_FILE)
				rc = hostfs_write(root, c->path, c->old, strlen(c->old), 1);
			else if (hostfs_path(root, c->path, full, sizeof(full)) < 0 ||
				 (unlink(full) < 0 && errno != ENOENT))
				rc = APP_EIO;
			break;
		}
		if (rc < 0) {
			fprintf(out, "  %-24s failed to restore %s: %s\n", c->what, c->path, strerror(errno));
			failed++;
		}
	}
	fprintf(out, "restored %d value%s of profile %s\n", s.recorded.n - failed,
		s.recorded.n - failed == 1 ? "" : "s", s.profile[0] ? s.profile : "(unnamed)");
	plan_free(&s.recorded);
	if (failed) {
		snprintf(err, errsize, "%d value%s could not be restored; %s is kept so revert can be run again",
			 failed, failed == 1 ? "" : "s", TUNE_STATE_FILE);
		return APP_EIO;
	}
	{
		char full[4096];
		if (hostfs_path(root, TUNE_STATE_FILE, full, sizeof(full)) == 0)
			unlink(full);
		for (int i = s.n_dirs - 1; i >= 0; i--)
			if (hostfs_path(root, s.dirs[i], full, sizeof(full)) == 0)
				rmdir(full); /* only when empty: something else may live there now */
	}
	return 0;
}
