/* RDMA devices from sysfs. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "strfmt.h"
#include "hostfs.h"
#include "rdma.h"

int
rdma_parse_guid(const char *s, uint64_t *v)
{
	uint64_t g = 0;
	int digits = 0;

	for (int group = 0; group < 4; group++) {
		for (int i = 0; i < 4; i++, s++) {
			if (!isxdigit((unsigned char)*s))
				return APP_EFORMAT;
			g = g << 4 |
			    (uint64_t)(isdigit((unsigned char)*s) ? *s - '0' : (tolower((unsigned char)*s) - 'a' + 10));
			digits++;
		}
		if (group < 3 && *s++ != ':')
			return APP_EFORMAT;
	}
	if (*s != '\0' || digits != 16)
		return APP_EFORMAT;
	*v = g;
	return 0;
}

long long
rdma_parse_rate(const char *s)
{
	char *end;
	double gbps;

	errno = 0;
	gbps = strtod(s, &end);
	if (end == s || errno != 0 || gbps <= 0 || gbps > 100000 || strncmp(end, " Gb/sec", 7) != 0)
		return APP_EFORMAT;
	return (long long)(gbps * 1000 + 0.5);
}

int
rdma_parse_state(const char *s, char *name, size_t size)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (end == s || errno != 0 || v < 0 || v > 7 || strncmp(end, ": ", 2) != 0 || end[2] == '\0')
		return APP_EFORMAT;
	snprintf(name, size, "%s", end + 2);
	return (int)v;
}

static void
note(struct rdma_dev *d, const char *what)
{
	size_t n = strlen(d->problem);

	snprintf(d->problem + n, sizeof(d->problem) - n, "%s%s", n ? " " : "", what);
}

static int
by_number(const void *a, const void *b)
{
	return atoi(*(char *const *)a) - atoi(*(char *const *)b);
}

static void
read_port(const char *root, const char *dir, struct rdma_dev *d, struct rdma_port *p)
{
	char path[256], line[64];

	p->state = -1;
	p->rate_mbps = -1;
	if (str_fmt(path, sizeof(path), "%s/state", dir) != APP_OK ||
	    hostfs_read_line(root, path, line, sizeof(line)) < 0 ||
	    (p->state = rdma_parse_state(line, p->state_name, sizeof(p->state_name))) < 0) {
		p->state = -1;
		note(d, "state");
	}
	if (str_fmt(path, sizeof(path), "%s/phys_state", dir) != APP_OK ||
	    hostfs_read_line(root, path, line, sizeof(line)) < 0 ||
	    rdma_parse_state(line, p->phys_state, sizeof(p->phys_state)) < 0)
		p->phys_state[0] = '\0';
	if (str_fmt(path, sizeof(path), "%s/rate", dir) != APP_OK ||
	    hostfs_read_line(root, path, p->rate, sizeof(p->rate)) < 0 ||
	    (p->rate_mbps = rdma_parse_rate(p->rate)) < 0) {
		p->rate_mbps = -1; /* unknown (rdma.h) */
		p->rate[0] = '\0';
		note(d, "rate");
	}
	if (str_fmt(path, sizeof(path), "%s/link_layer", dir) != APP_OK ||
	    hostfs_read_line(root, path, p->link_layer, sizeof(p->link_layer)) < 0 ||
	    (strcmp(p->link_layer, "InfiniBand") != 0 && strcmp(p->link_layer, "Ethernet") != 0)) {
		p->link_layer[0] = '\0';
		note(d, "link_layer");
	}
}

static void
read_guid(const char *root, const char *base, const char *attr, struct rdma_dev *d, uint64_t *v)
{
	char path[256], line[64];

	if (str_fmt(path, sizeof(path), "%s/%s", base, attr) != APP_OK ||
	    hostfs_read_line(root, path, line, sizeof(line)) < 0 || rdma_parse_guid(line, v) < 0) {
		*v = 0;
		note(d, attr);
	}
}

void
rdma_read_sysfs(const char *root, const char *name, struct rdma_dev *d)
{
	char base[128], path[192], **ports = NULL;
	int n = 0;

	memset(d, 0, sizeof(*d));
	snprintf(d->name, sizeof(d->name), "%s", name);
	if (str_fmt(base, sizeof(base), "/sys/class/infiniband/%s", name) != APP_OK) {
		note(d, "name"); /* longer than any device name the kernel gives */
		return;
	}
	read_guid(root, base, "node_guid", d, &d->node_guid);
	read_guid(root, base, "sys_image_guid", d, &d->sys_image_guid);
	if (str_fmt(path, sizeof(path), "%s/fw_ver", base) != APP_OK ||
	    hostfs_read_line(root, path, d->fw_ver, sizeof(d->fw_ver)) < 0)
		d->fw_ver[0] = '\0';
	if (str_fmt(path, sizeof(path), "%s/ports", base) == APP_OK)
		ports = hostfs_list(root, path, 64, &n);
	if (n == 0)
		note(d, "ports");
	if (ports != NULL)
		qsort(ports, (size_t)n, sizeof(*ports), by_number);
	for (int i = 0; i < n && d->n_ports < RDMA_MAX_PORTS; i++) {
		char *end;
		long num = strtol(ports[i], &end, 10);
		if (end == ports[i] || *end != '\0' || num < 1 || num > 255)
			continue;
		struct rdma_port *p = &d->port[d->n_ports++];
		p->num = (int)num;
		if (str_fmt(path, sizeof(path), "%s/ports/%ld", base, num) == APP_OK)
			read_port(root, path, d, p);
	}
	hostfs_free_names(ports, n);
}
