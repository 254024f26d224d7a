/*
 * privai-firstboot: day-0 configuration of the appliance from three
 * sources, later ones winning key by key:
 *
 *   1. /etc/privai/appliance.conf   defaults shipped in the image (KEY=VALUE)
 *   2. cloud-init                   the `privai:` mapping of the merged cloud-config
 *   3. the OVF environment          vSphere's guestinfo.ovfEnv, or ovf-env.xml on a CD
 *
 * Every value is checked when it is read (keys.c); a bad one is kept with
 * the reason so that its step is skipped and reported, never applied.
 * apply.c then runs each step on its own (hostname, network, NTP, admin
 * password, SSH key, cluster, TLS, models): a step writes only what
 * differs from what is there, so a second boot applies nothing twice,
 * and a failed step stops nothing else.  report.c records it all in
 * /var/lib/privai/firstboot.json, the console's issue file and the journal.
 */
#ifndef PRIVAI_FIRSTBOOT_H
#define PRIVAI_FIRSTBOOT_H

#include <cjson/cJSON.h>
#include <stddef.h>

enum fb_key {
	FB_HOSTNAME,
	FB_IP,
	FB_GATEWAY,
	FB_DNS,
	FB_NTP,
	FB_ADMIN_PASSWORD,
	FB_SSH_KEY,
	FB_ROLE,
	FB_JOIN_URL,
	FB_JOIN_TOKEN,
	FB_JOIN_PIN,
	FB_TLS_CERT,
	FB_TLS_KEY,
	FB_MODELS,
	FB_NKEYS
};

struct fb_key_info {
	const char *name; /* as in appliance.conf and cloud-config; OVF adds "privai." */
	int secret;       /* never shown in a report or a log */
	int ovf_base64;   /* OVF carries it base64-encoded (PEM text) */
	size_t max_len;
	int (*check)(const char *v, char *why, size_t size); /* 0, or -1 with why */
	const char *label, *description;                     /* for the OVF descriptor and the docs */
	const char *group;                                   /* the OVF deploy wizard's category */
	const char *choices;                                 /* the only values, comma-separated; NULL: free text */
};

extern const struct fb_key_info fb_keys[FB_NKEYS];

struct fb_value {
	char *value;       /* NULL when no source gave the key */
	char source[64];   /* which source, e.g. "cloud-init (/var/lib/cloud/...)" */
	char problem[300]; /* why the value was refused; "" when it is good */
};

struct fb_config {
	struct fb_value v[FB_NKEYS];
	cJSON *warnings; /* unknown keys, unreadable sources: array of strings */
};

/* The key called name, or -1. */
int fb_key_find(const char *name);

void fb_config_init(struct fb_config *c);
void fb_config_free(struct fb_config *c);
/* Take value for key from source, replacing what an earlier source gave:
 * checked here; a bad value is kept (not applied) with its problem. */
void fb_config_set(struct fb_config *c, enum fb_key key, const char *value, const char *source);
/* Move src's warnings, and when values is set its keys (later wins),
 * into dst: a source read whole or not at all. */
void fb_config_merge(struct fb_config *dst, struct fb_config *src, int values);
/* A warning for the report, printf-style. */
void fb_warn(struct fb_config *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The value when one was given and it is good, else NULL. */
const char *fb_good(const struct fb_config *c, enum fb_key key);

/* The sources (source_*.c).  Each returns 0 when it was read (or is
 * absent: nothing to take), -1 when it exists but cannot be read or
 * parsed (then a warning says why and none of its keys are taken). */
int fb_read_conf(struct fb_config *c, const char *root, const char *path);
int fb_read_cloud_config(struct fb_config *c, const char *root, const char *path);
int fb_read_ovf_env(struct fb_config *c, const char *xml, size_t len, const char *source);
/* The OVF environment from vmware-rpctool or a CD-ROM, when root is "/":
 * malloc'd XML and where it came from, or NULL. */
char *fb_find_ovf_env(const char *root, char *ret_source, size_t size);

/* One step's outcome, for the report. */
enum fb_state { FB_ABSENT, FB_UNCHANGED, FB_APPLIED, FB_REFUSED, FB_FALLBACK, FB_FAILED, FB_PENDING };

struct fb_step {
	const char *name;
	enum fb_state state;
	char message[400];
};

#define FB_NSTEPS 8

struct fb_apply_opts {
	const char *root; /* "/" on the appliance; a scratch tree in tests */
	int live;         /* also tell the running system (hostnamed); root must be "/" */
};

/* Run every step; steps[] gets each outcome in order. */
void fb_apply(const struct fb_config *c, const struct fb_apply_opts *o, struct fb_step steps[FB_NSTEPS]);

/* The record (firstboot.json), the console's issue file and the console
 * lines; 0, or -1 when the record could not be written. */
int fb_report(const struct fb_config *c, const struct fb_step steps[FB_NSTEPS], const struct fb_apply_opts *o,
	      long long now);
const char *fb_state_name(enum fb_state s);

#endif
