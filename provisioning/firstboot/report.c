/*
 * What day-0 configuration did, where an administrator will look: the
 * record /var/lib/privai/firstboot.json (the console shows it), the issue
 * file agetty prints above the console's login prompt, the console itself
 * and the journal (stderr).  Secrets are never written: a secret key's
 * value reads "(given)".
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "firstboot.h"
#include "hostfs.h"

#define RECORD "/var/lib/privai/firstboot.json"
#define ISSUE "/etc/issue.d/50-privai.issue"

const char *
fb_state_name(enum fb_state s)
{
	switch (s) {
	case FB_ABSENT:
		return "not given";
	case FB_UNCHANGED:
		return "unchanged";
	case FB_APPLIED:
		return "applied";
	case FB_REFUSED:
		return "refused";
	case FB_FALLBACK:
		return "fallback";
	case FB_FAILED:
		return "failed";
	case FB_PENDING:
		return "pending";
	}
	return "?";
}

static int
is_problem(enum fb_state s)
{
	return s == FB_REFUSED || s == FB_FALLBACK || s == FB_FAILED;
}

static cJSON *
record(const struct fb_config *c, const struct fb_step steps[FB_NSTEPS], long long now)
{
	cJSON *root = cJSON_CreateObject(), *keys = cJSON_AddObjectToObject(root, "keys"),
	      *list = cJSON_AddArrayToObject(root, "steps");

	cJSON_AddNumberToObject(root, "at", (double)now);
	for (int k = 0; k < FB_NKEYS; k++) {
		const struct fb_value *v = &c->v[k];
		if (v->value == NULL)
			continue;
		cJSON *o = cJSON_AddObjectToObject(keys, fb_keys[k].name);
		cJSON_AddStringToObject(o, "value", fb_keys[k].secret ? "(given)" : v->value);
		cJSON_AddStringToObject(o, "source", v->source);
		if (v->problem[0] != '\0')
			cJSON_AddStringToObject(o, "problem", v->problem);
		else
			cJSON_AddNullToObject(o, "problem");
	}
	for (int i = 0; i < FB_NSTEPS; i++) {
		cJSON *o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "step", steps[i].name);
		cJSON_AddStringToObject(o, "state", fb_state_name(steps[i].state));
		cJSON_AddStringToObject(o, "message", steps[i].message);
		cJSON_AddItemToArray(list, o);
	}
	cJSON_AddItemToObject(root, "warnings", cJSON_Duplicate(c->warnings, 1));
	return root;
}

int
fb_report(const struct fb_config *c, const struct fb_step steps[FB_NSTEPS], const struct fb_apply_opts *o,
	  long long now)
{
	char issue[8192];
	size_t n = 0;
	int problems = 0, rc = 0;
	cJSON *w;

	for (int i = 0; i < FB_NSTEPS; i++)
		fprintf(stderr, "privai-firstboot: %s: %s: %s\n", steps[i].name, fb_state_name(steps[i].state),
			steps[i].message);
	cJSON_ArrayForEach (w, c->warnings)
		fprintf(stderr, "privai-firstboot: warning: %s\n", w->valuestring);
	/* agetty expands \4 to the machine's IPv4 address */
	n += (size_t)snprintf(issue, sizeof(issue), "privai appliance: open https://\\4/ in a browser\n");
	for (int i = 0; i < FB_NSTEPS; i++)
		if (is_problem(steps[i].state) && n < sizeof(issue)) {
			problems++;
			n += (size_t)snprintf(issue + n, sizeof(issue) - n, "privai-firstboot: %s %s: %s\n",
					      steps[i].name, fb_state_name(steps[i].state), steps[i].message);
		}
	if (n >= sizeof(issue))
		n = sizeof(issue) - 1;
	issue[n] = '\0';
	/* agetty reads the issue file with escapes: a backslash in a message
	 * would become one, so only the \4 above is meant */
	for (char *p = strchr(issue, '\n'); p != NULL && (p = strchr(p, '\\')) != NULL;)
		*p++ = '/';
	if (hostfs_install(o->root, ISSUE, issue, strlen(issue), 0644, NULL) < 0) {
		fprintf(stderr, "privai-firstboot: cannot write %s: %s\n", ISSUE, strerror(errno));
		rc = -1;
	}
	if (o->live && problems > 0) {
		int fd = open("/dev/console", O_WRONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
		if (fd >= 0) {
			const char *body = strchr(issue, '\n') + 1;
			(void)!write(fd, body, strlen(body));
			close(fd);
		}
	}
	cJSON *root = record(c, steps, now);
	char *js = root != NULL ? cJSON_Print(root) : NULL;
	cJSON_Delete(root);
	if (js == NULL || hostfs_install(o->root, RECORD, js, strlen(js), 0644, NULL) < 0) {
		fprintf(stderr, "privai-firstboot: cannot write %s: %s\n", RECORD,
			js ? strerror(errno) : "out of memory");
		rc = -1;
	}
	free(js);
	return rc;
}
