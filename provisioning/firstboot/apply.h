/* What the apply_*.c files share (firstboot.h has the public side). */
#ifndef PRIVAI_FIRSTBOOT_APPLY_H
#define PRIVAI_FIRSTBOOT_APPLY_H

#include <stdarg.h>
#include <sys/types.h>

#include "firstboot.h"

void step_set(struct fb_step *s, enum fb_state state, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Install a file under o->root (only when it differs); *changed |= written.
 * 0, or -1 with the step failed. */
int install(struct fb_step *s, const struct fb_apply_opts *o, const char *path, const char *text, mode_t mode,
	    int *changed);
/* 1 (step refused, naming the key, its source and problem) when key was
 * given with a bad value; else 0. */
int refused(struct fb_step *s, const struct fb_config *c, enum fb_key k);

/* The static address the network step gives the first link (without its
 * prefix) in out, and 1; 0 when the machine uses DHCP, with *why saying
 * why when a value given was refused (why may be NULL). */
int static_address(const struct fb_config *c, char *out, size_t size, char *why, size_t wsize);

/* steps[0..2]: hostname, network, ntp */
void apply_host(const struct fb_config *c, const struct fb_apply_opts *o, struct fb_step *steps);
/* steps[0..4]: admin_password, ssh_key, cluster, tls, models; then admin.env */
void apply_admin(const struct fb_config *c, const struct fb_apply_opts *o, struct fb_step *steps);

#endif
