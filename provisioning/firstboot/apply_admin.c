/*
 * The control plane's steps: what privai-admin is started with, through
 * /etc/privai/admin.env (its unit's EnvironmentFile) and files only it
 * may read: the admin's first password, the cluster join, the TLS pair;
 * root's SSH key; models named for registration.
 */
#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "status.h"
#include "apply.h"
#include "firstboot.h"
#include "hostfs.h"
#include "http/tls.h"

#define ENV_FILE "/etc/privai/admin.env"
#define PASSWORD_FILE "/etc/privai/admin-password"
#define JOIN_TOKEN_FILE "/etc/privai/join-token"
#define TLS_CERT "/etc/privai/tls/cert.pem"
#define TLS_KEY "/etc/privai/tls/key.pem"
#define STORE "/var/lib/privai/privai.db"

struct env {
	char text[8192];
	size_t len;
};

static void
env_add(struct env *e, const char *name, const char *value)
{
	int n = snprintf(e->text + e->len, sizeof(e->text) - e->len, "%s=%s\n", name, value);

	if (n > 0 && (size_t)n < sizeof(e->text) - e->len)
		e->len += (size_t)n;
}

/* On the appliance privai-admin runs as user privai and must read its
 * secrets; in a scratch tree there is no such user to give them to. */
static int
give_to_privai(const struct fb_apply_opts *o, const char *path)
{
	struct passwd *pw;

	if (!o->live || (pw = getpwnam("privai")) == NULL)
		return 0;
	return chown(path, pw->pw_uid, pw->pw_gid);
}

static int
install_secret(struct fb_step *s, const struct fb_apply_opts *o, const char *path, const char *text, int *changed)
{
	if (install(s, o, path, text, 0600, changed) < 0)
		return -1;
	if (give_to_privai(o, path) < 0) {
		step_set(s, FB_FAILED, "cannot give %s to user privai: %s", path, strerror(errno));
		return -1;
	}
	return 0;
}

static void
step_password(const struct fb_config *c, const struct fb_apply_opts *o, struct fb_step *s, struct env *e)
{
	const char *pw = fb_good(c, FB_ADMIN_PASSWORD);
	char line[1100];
	int changed = 0;

	if (c->v[FB_ADMIN_PASSWORD].value != NULL && pw == NULL) {
		step_set(s, FB_REFUSED,
			 "admin_password from %s: %s; the console keeps its one-time password (see "
			 "privai-admin's log)",
			 c->v[FB_ADMIN_PASSWORD].source, c->v[FB_ADMIN_PASSWORD].problem);
		return;
	}
	if (pw == NULL) {
		step_set(s, FB_ABSENT, "no admin password given: the console makes a one-time one");
		return;
	}
	if (hostfs_exists(o->root, STORE)) {
		/* the password is read at the console's first start only */
		if (hostfs_exists(o->root, PASSWORD_FILE))
			env_add(e, "PRIVAI_ADMIN_PASSWORD_FILE", PASSWORD_FILE);
		step_set(s, FB_UNCHANGED,
			 "the console has its admin already; a password given now is not applied "
			 "(change it in the console, or privai-admin reset-password admin)");
		return;
	}
	snprintf(line, sizeof(line), "%s\n", pw);
	int rc = install_secret(s, o, PASSWORD_FILE, line, &changed);
	memset(line, 0, sizeof(line));
	if (rc < 0)
		return;
	env_add(e, "PRIVAI_ADMIN_PASSWORD_FILE", PASSWORD_FILE);
	step_set(s, changed ? FB_APPLIED : FB_UNCHANGED, "the admin's first password (from %s)",
		 c->v[FB_ADMIN_PASSWORD].source);
}

static void
step_ssh(const struct fb_config *c, const struct fb_apply_opts *o, struct fb_step *s)
{
	const char *key = fb_good(c, FB_SSH_KEY), *path = "/root/.ssh/authorized_keys";
	char dir[4200];
	int changed = 0;

	if (refused(s, c, FB_SSH_KEY))
		return;
	if (key == NULL) {
		step_set(s, FB_ABSENT, "no SSH key given");
		return;
	}
	char *old = hostfs_read_text(o->root, path, 1 << 20, NULL);
	size_t ol = old ? strlen(old) : 0, kl = strlen(key);
	for (const char *p = old; p != NULL && (p = strstr(p, key)) != NULL; p += kl)
		if ((p == old || p[-1] == '\n') && (p[kl] == '\n' || p[kl] == '\0')) {
			free(old);
			step_set(s, FB_UNCHANGED, "root's authorized_keys has it");
			return;
		}
	char *text = malloc(ol + kl + 3);
	if (text == NULL) {
		free(old);
		step_set(s, FB_FAILED, "out of memory");
		return;
	}
	snprintf(text, ol + kl + 3, "%s%s%s\n", old ? old : "", ol && old[ol - 1] != '\n' ? "\n" : "", key);
	free(old);
	if (hostfs_path(o->root, "/root", dir, sizeof(dir)) == 0)
		(void)mkdir(dir, 0700); /* there on a real system; not in a scratch tree */
	if (hostfs_path(o->root, "/root/.ssh", dir, sizeof(dir)) == 0 && mkdir(dir, 0700) != 0 && errno != EEXIST) {
		free(text);
		step_set(s, FB_FAILED, "cannot create /root/.ssh: %s", strerror(errno));
		return;
	}
	if (install(s, o, path, text, 0600, &changed) == 0)
		step_set(s, FB_APPLIED, "added to root's authorized_keys (from %s)", c->v[FB_SSH_KEY].source);
	free(text);
}

static void
step_cluster(const struct fb_config *c, const struct fb_apply_opts *o, struct fb_step *s, struct env *e)
{
	const char *role = fb_good(c, FB_ROLE), *url = fb_good(c, FB_JOIN_URL), *tok = fb_good(c, FB_JOIN_TOKEN),
		   *pin = fb_good(c, FB_JOIN_PIN);
	char line[128];
	int changed = 0;

	if (refused(s, c, FB_ROLE) || refused(s, c, FB_JOIN_URL) || refused(s, c, FB_JOIN_TOKEN) ||
	    refused(s, c, FB_JOIN_PIN))
		return;
	if (role == NULL || strcmp(role, "leader") == 0) {
		if (url != NULL || tok != NULL)
			step_set(s, FB_REFUSED, "join_url and join_token are for a member; role is %s",
				 role ? role : "leader (not given)");
		else
			step_set(s, FB_ABSENT, "a leader (its own cluster)");
		return;
	}
	if (url == NULL || tok == NULL) {
		step_set(s, FB_REFUSED, "a member needs join_url and join_token; it stays a leader of its own");
		return;
	}
	snprintf(line, sizeof(line), "%s\n", tok);
	int rc = install_secret(s, o, JOIN_TOKEN_FILE, line, &changed);
	memset(line, 0, sizeof(line));
	if (rc < 0)
		return;
	env_add(e, "PRIVAI_JOIN_URL", url);
	env_add(e, "PRIVAI_JOIN_TOKEN_FILE", JOIN_TOKEN_FILE);
	if (pin != NULL)
		env_add(e, "PRIVAI_JOIN_PIN", pin);
	step_set(s, changed ? FB_APPLIED : FB_UNCHANGED, "a member of %s%s (from %s)", url,
		 pin ? ", its key pinned" : "", c->v[FB_JOIN_URL].source);
}

static void
step_tls(const struct fb_config *c, const struct fb_apply_opts *o, struct fb_step *s, struct env *e)
{
	const char *cert = fb_good(c, FB_TLS_CERT), *key = fb_good(c, FB_TLS_KEY);
	char err[APP_ERR_LEN];
	int changed = 0;

	if (refused(s, c, FB_TLS_CERT) || refused(s, c, FB_TLS_KEY))
		return;
	if (cert == NULL && key == NULL) {
		step_set(s, FB_ABSENT, "no certificate given: the console makes a self-signed one");
		return;
	}
	if (cert == NULL || key == NULL) {
		step_set(s, FB_REFUSED, "tls_cert and tls_key go together; the self-signed certificate stays");
		return;
	}
	if (tls_check_pair(cert, key, err) != APP_OK) {
		step_set(s, FB_REFUSED, "%s; the self-signed certificate stays", err);
		return;
	}
	if (install(s, o, TLS_CERT, cert, 0644, &changed) < 0 || install_secret(s, o, TLS_KEY, key, &changed) < 0)
		return;
	env_add(e, "PRIVAI_TLS_CERT", TLS_CERT);
	env_add(e, "PRIVAI_TLS_KEY", TLS_KEY);
	step_set(s, changed ? FB_APPLIED : FB_UNCHANGED, "the given certificate (from %s)", c->v[FB_TLS_CERT].source);
}

/* Whether the admin.env in place has this line already (a step whose only
 * effect is a line there applied nothing new). */
static int
env_had(const struct fb_apply_opts *o, const char *name, const char *value)
{
	char line[4200];
	char *text = hostfs_read_text(o->root, ENV_FILE, 1 << 16, NULL);
	int had;

	snprintf(line, sizeof(line), "\n%s=%s\n", name, value);
	had = text != NULL && strstr(text, line) != NULL;
	free(text);
	return had;
}

static void
step_models(const struct fb_config *c, const struct fb_apply_opts *o, struct fb_step *s, struct env *e)
{
	if (refused(s, c, FB_MODELS))
		return;
	if (fb_good(c, FB_MODELS) == NULL) {
		step_set(s, FB_ABSENT, "no models named");
		return;
	}
	/* privai-admin registers them at its start, each path only once; what
	 * became of each is in its Models list and audit log */
	const char *models = fb_good(c, FB_MODELS);
	env_add(e, "PRIVAI_DAY0_MODELS", models);
	step_set(s, env_had(o, "PRIVAI_DAY0_MODELS", models) ? FB_UNCHANGED : FB_APPLIED,
		 "%s: handed to privai-admin, which registers each at its start (from %s)", models,
		 c->v[FB_MODELS].source);
}

void
apply_admin(const struct fb_config *c, const struct fb_apply_opts *o, struct fb_step *steps)
{
	struct env e = { .len = 0 };
	struct fb_step env_step = { .name = "admin.env" };
	int changed = 0;

	e.len = (size_t)snprintf(e.text, sizeof(e.text),
				 "# privai-firstboot: privai-admin's settings from day-0 "
				 "configuration (see /var/lib/privai/firstboot.json)\n");
	if (fb_good(c, FB_HOSTNAME) != NULL)
		env_add(&e, "PRIVAI_NODE_NAME", fb_good(c, FB_HOSTNAME));
	/* how the other nodes reach this console: its static address (listening
	 * on every address, privai-admin cannot tell which one that is) */
	char addr[64], url[80];
	if (static_address(c, addr, sizeof(addr), NULL, 0)) {
		snprintf(url, sizeof(url), strchr(addr, ':') != NULL ? "https://[%s]" : "https://%s", addr);
		env_add(&e, "PRIVAI_ADVERTISE_URL", url);
	}
	steps[0].name = "admin_password";
	step_password(c, o, &steps[0], &e);
	steps[1].name = "ssh_key";
	step_ssh(c, o, &steps[1]);
	steps[2].name = "cluster";
	step_cluster(c, o, &steps[2], &e);
	steps[3].name = "tls";
	step_tls(c, o, &steps[3], &e);
	steps[4].name = "models";
	step_models(c, o, &steps[4], &e);
	/* every step above adds its lines; one write, only when it differs */
	if (install(&env_step, o, ENV_FILE, e.text, 0600, &changed) < 0) {
		for (int i = 0; i < 4; i++)
			if (steps[i].state == FB_APPLIED || steps[i].state == FB_UNCHANGED)
				step_set(&steps[i], FB_FAILED, "%s", env_step.message);
	}
}
