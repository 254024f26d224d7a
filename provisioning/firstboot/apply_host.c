/*
 * The machine's own steps: host name (/etc/hostname, /etc/hosts, and
 * hostnamed when live), network (one systemd-networkd file) and NTP (a
 * timesyncd drop-in).  A bad address never costs the machine its
 * network: the file then says DHCP, and the step reports the fallback.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-bus.h>
#include <unistd.h>

#include "status.h"
#include "apply.h"
#include "firstboot.h"
#include "hostfs.h"

#define NETWORK_FILE "/etc/systemd/network/10-privai.network"
#define NTP_FILE "/etc/systemd/timesyncd.conf.d/50-privai.conf"

void
step_set(struct fb_step *s, enum fb_state state, const char *fmt, ...)
{
	va_list ap;

	s->state = state;
	va_start(ap, fmt);
	vsnprintf(s->message, sizeof(s->message), fmt, ap);
	va_end(ap);
}

/* Install path and set the step from the outcome; 0 or -1. */
int
install(struct fb_step *s, const struct fb_apply_opts *o, const char *path, const char *text, mode_t mode, int *changed)
{
	int ch = 0;

	if (hostfs_install(o->root, path, text, strlen(text), mode, &ch) < 0) {
		step_set(s, FB_FAILED, "cannot write %s: %s", path, strerror(errno));
		return -1;
	}
	*changed |= ch;
	return 0;
}

/* A key given but refused: the step is refused with the key's problem. */
int
refused(struct fb_step *s, const struct fb_config *c, enum fb_key k)
{
	if (c->v[k].value == NULL || c->v[k].problem[0] == '\0')
		return 0;
	step_set(s, FB_REFUSED, "%s from %s: %s", fb_keys[k].name, c->v[k].source, c->v[k].problem);
	return 1;
}

/* A method of a system service over the system bus; 0, or -1 with why. */
static int
bus_call(const char *dest, const char *path, const char *iface, const char *method, char *why, size_t size,
	 const char *types, ...)
{
	sd_bus *bus = NULL;
	sd_bus_error e = SD_BUS_ERROR_NULL;
	sd_bus_message *m = NULL;
	va_list ap;
	int r = sd_bus_open_system(&bus);

	if (r >= 0)
		r = sd_bus_message_new_method_call(bus, &m, dest, path, iface, method);
	if (r >= 0 && types != NULL) {
		va_start(ap, types);
		r = sd_bus_message_appendv(m, types, ap);
		va_end(ap);
	}
	if (r >= 0)
		r = sd_bus_call(bus, m, 0, &e, NULL);
	if (r < 0)
		snprintf(why, size, "%s.%s: %s", dest, method, e.message ? e.message : strerror(-r));
	sd_bus_error_free(&e);
	sd_bus_message_unref(m);
	sd_bus_unref(bus);
	return r < 0 ? APP_EIO : APP_OK;
}

/* The running system's name now: hostnamed, or the kernel's when the bus
 * is not there (the file is what counts at the next boot). */
static int
hostname_live(const char *name, char *why, size_t size)
{
	if (bus_call("org.freedesktop.hostname1", "/org/freedesktop/hostname1", "org.freedesktop.hostname1",
		     "SetStaticHostname", why, size, "sb", name, 0) == 0)
		return 0;
	return sethostname(name, strlen(name)) == 0 ? APP_OK : APP_EIO;
}

/* /etc/hosts with name on 127.0.1.1 (Debian's way), other lines kept. */
static char *
hosts_with(const char *root, const char *name)
{
	char *old = hostfs_read_text(root, "/etc/hosts", 1 << 20, NULL), *save = NULL;
	size_t cap = (old ? strlen(old) : 0) + strlen(name) + 64;
	char *out = malloc(cap);

	if (out == NULL) {
		free(old);
		return NULL;
	}
	out[0] = '\0';
	if (old == NULL)
		strcat(out, "127.0.0.1\tlocalhost\n");
	for (char *l = old ? strtok_r(old, "\n", &save) : NULL; l != NULL; l = strtok_r(NULL, "\n", &save))
		if (strncmp(l, "127.0.1.1", 9) != 0) {
			strcat(out, l);
			strcat(out, "\n");
		}
	strcat(out, "127.0.1.1\t");
	strcat(out, name);
	strcat(out, "\n");
	free(old);
	return out;
}

static void
step_hostname(const struct fb_config *c, const struct fb_apply_opts *o, struct fb_step *s)
{
	const char *name = fb_good(c, FB_HOSTNAME);
	char line[300], why[300];
	int changed = 0;

	if (refused(s, c, FB_HOSTNAME))
		return;
	if (name == NULL) {
		step_set(s, FB_ABSENT, "no host name given; the image's stays");
		return;
	}
	snprintf(line, sizeof(line), "%s\n", name);
	char *hosts = hosts_with(o->root, name);
	if (hosts == NULL) {
		step_set(s, FB_FAILED, "out of memory");
		return;
	}
	int rc = install(s, o, "/etc/hostname", line, 0644, &changed) < 0 ||
		 install(s, o, "/etc/hosts", hosts, 0644, &changed) < 0;
	free(hosts);
	if (rc)
		return;
	if (o->live && changed && hostname_live(name, why, sizeof(why)) < 0) {
		step_set(s, FB_FAILED, "%s written, but %s", "/etc/hostname", why);
		return;
	}
	step_set(s, changed ? FB_APPLIED : FB_UNCHANGED, "%s (from %s)", name, c->v[FB_HOSTNAME].source);
}

/*
 * The link a static address goes to: the physical Ethernet link with the
 * lowest index (the VM's first NIC).  Given to every link, one address
 * would be claimed on each network; the other links keep DHCP from the
 * image's 90-privai-dhcp.network.  "" when /sys shows none (a scratch
 * root): then the file matches every Ethernet link, as DHCP does.
 */
static void
first_ethernet(const char *root, char *out, size_t size)
{
	long long best = -1, index, type;
	char path[300];
	int n;
	char **names = hostfs_list(root, "/sys/class/net", 256, &n);

	out[0] = '\0';
	for (int i = 0; names != NULL && i < n; i++) {
		snprintf(path, sizeof(path), "/sys/class/net/%s/device", names[i]);
		if (!hostfs_exists(root, path))
			continue; /* lo, bridges, bonds, tunnels */
		snprintf(path, sizeof(path), "/sys/class/net/%s/type", names[i]);
		if (hostfs_read_long(root, path, 10, &type) != 0 || type != 1 /* ARPHRD_ETHER */)
			continue;
		snprintf(path, sizeof(path), "/sys/class/net/%s/ifindex", names[i]);
		if (hostfs_read_long(root, path, 10, &index) != 0 || (best >= 0 && index >= best))
			continue;
		best = index;
		snprintf(out, size, "%s", names[i]);
	}
	if (names != NULL)
		hostfs_free_names(names, n);
}

int
static_address(const struct fb_config *c, char *out, size_t size, char *why, size_t wsize)
{
	const char *ip = fb_good(c, FB_IP), *gw = fb_good(c, FB_GATEWAY);
	char scratch[400];

	if (why == NULL)
		why = scratch, wsize = sizeof(scratch);
	why[0] = '\0';
	for (int k = FB_IP; k <= FB_DNS && why[0] == '\0'; k++)
		if (c->v[k].value != NULL && c->v[k].problem[0] != '\0')
			snprintf(why, wsize, "%s from %s: %s", fb_keys[k].name, c->v[k].source, c->v[k].problem);
	if (why[0] == '\0' && gw != NULL && (ip == NULL || strcmp(ip, "dhcp") == 0))
		snprintf(why, wsize, "a gateway goes with a static ip, not DHCP");
	if (why[0] == '\0' && ip != NULL && strcmp(ip, "dhcp") != 0 && gw == NULL)
		snprintf(why, wsize, "a static ip needs a gateway");
	if (why[0] != '\0' || ip == NULL || strcmp(ip, "dhcp") == 0)
		return 0;
	snprintf(out, size, "%.*s", (int)strcspn(ip, "/"), ip);
	return 1;
}

/* The networkd file for the decided values; *why says what fell back. */
static void
network_text(const struct fb_config *c, const char *link, char *out, size_t size, char *why, size_t wsize)
{
	const char *ip = fb_good(c, FB_IP), *gw = fb_good(c, FB_GATEWAY), *dns = fb_good(c, FB_DNS);
	char addr[64];
	int dhcp = !static_address(c, addr, sizeof(addr), why, wsize);
	int n = snprintf(out, size, "# privai-firstboot: %s\n[Match]\nName=%s\n\n[Network]\n",
			 why[0] ? "DHCP, because a given value was refused (see /var/lib/privai/firstboot.json)"
			 : dhcp ? "DHCP"
				: "the static address given",
			 dhcp || link[0] == '\0' ? "en* eth*" : link);
	if (dhcp)
		n += snprintf(out + n, size - (size_t)n, "DHCP=yes\n");
	else
		n += snprintf(out + n, size - (size_t)n, "Address=%s\nGateway=%s\n", ip, gw);
	if (dns != NULL && why[0] == '\0')
		for (const char *p = dns; *p;) {
			size_t len = strcspn(p, ",");
			while (*p == ' ')
				p++, len--;
			n += snprintf(out + n, size - (size_t)n, "DNS=%.*s\n", (int)len, p);
			p += len;
			if (*p == ',')
				p++;
		}
}

static void
step_network(const struct fb_config *c, const struct fb_apply_opts *o, struct fb_step *s)
{
	char text[2048], why[400], link[64];
	int changed = 0;

	first_ethernet(o->root, link, sizeof(link));
	network_text(c, link, text, sizeof(text), why, sizeof(why));
	if (install(s, o, NETWORK_FILE, text, 0644, &changed) < 0)
		return;
	/* networkd has read its files already: a change takes effect now */
	char bus_why[300];
	if (o->live && changed &&
	    bus_call("org.freedesktop.network1", "/org/freedesktop/network1", "org.freedesktop.network1.Manager",
		     "Reload", bus_why, sizeof(bus_why), NULL) < 0) {
		step_set(s, FB_FAILED, "%s written; it applies at the next boot (%s)", NETWORK_FILE, bus_why);
		return;
	}
	if (why[0] != '\0')
		step_set(s, FB_FALLBACK, "kept DHCP: %s", why);
	else if (fb_good(c, FB_IP) != NULL && strcmp(fb_good(c, FB_IP), "dhcp") != 0)
		step_set(s, changed ? FB_APPLIED : FB_UNCHANGED, "%s via %s on %s (from %s)", fb_good(c, FB_IP),
			 fb_good(c, FB_GATEWAY), link[0] ? link : "every Ethernet link", c->v[FB_IP].source);
	else
		step_set(s, changed ? FB_APPLIED : FB_UNCHANGED, "DHCP");
}

static void
step_ntp(const struct fb_config *c, const struct fb_apply_opts *o, struct fb_step *s)
{
	const char *ntp = fb_good(c, FB_NTP);
	char text[1200], path[4200];
	int changed = 0;

	if (refused(s, c, FB_NTP))
		return;
	if (ntp == NULL) {
		/* a server list taken out of the properties is taken off the machine */
		if (hostfs_path(o->root, NTP_FILE, path, sizeof(path)) == 0 && unlink(path) == 0)
			step_set(s, FB_APPLIED, "no NTP servers given any more: timesyncd's defaults again");
		else
			step_set(s, FB_ABSENT, "no NTP servers given: timesyncd's defaults");
		return;
	}
	int n = snprintf(text, sizeof(text), "# privai-firstboot\n[Time]\nNTP=");
	for (const char *p = ntp; *p && n < (int)sizeof(text) - 2; p++)
		if (*p != ' ')
			text[n++] = *p == ',' ? ' ' : *p;
	snprintf(text + n, sizeof(text) - (size_t)n, "\n");
	if (install(s, o, NTP_FILE, text, 0644, &changed) == 0)
		step_set(s, changed ? FB_APPLIED : FB_UNCHANGED, "%s (from %s)", ntp, c->v[FB_NTP].source);
}

void
apply_host(const struct fb_config *c, const struct fb_apply_opts *o, struct fb_step *steps)
{
	steps[0].name = "hostname";
	step_hostname(c, o, &steps[0]);
	steps[1].name = "network";
	step_network(c, o, &steps[1]);
	steps[2].name = "ntp";
	step_ntp(c, o, &steps[2]);
}

void
fb_apply(const struct fb_config *c, const struct fb_apply_opts *o, struct fb_step steps[FB_NSTEPS])
{
	memset(steps, 0, sizeof(struct fb_step) * FB_NSTEPS);
	apply_host(c, o, steps);
	apply_admin(c, o, steps + 3);
}
