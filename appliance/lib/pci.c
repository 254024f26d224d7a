/* PCI devices from sysfs: ids, links, bridges, ACS and ATS from config space. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "strfmt.h"
#include "hostfs.h"
#include "pci.h"

#define PCI_CFG_SIZE 4096
#define PCI_EXT_CAP_ACS 0x000d
#define PCI_EXT_CAP_ATS 0x000f

static void
note(struct pci_dev *d, const char *what)
{
	size_t n = strlen(d->problem);

	if (n + strlen(what) + 2 < sizeof(d->problem))
		snprintf(d->problem + n, sizeof(d->problem) - n, "%s%s", n ? " " : "", what);
}

/* "0000:1b:00.0": domain, bus, device (< 32), function (< 8), lower-case hex */
static int
is_bdf(const char *s)
{
	static const char shape[] = "hhhh:hh:hh.h";

	if (strlen(s) != sizeof(shape) - 1)
		return 0;
	for (size_t i = 0; shape[i] != '\0'; i++)
		if (shape[i] == 'h' ? !isxdigit((unsigned char)s[i]) : s[i] != shape[i])
			return 0;
	return strtol(s + 8, NULL, 16) < 32 && s[11] < '8';
}

double
pci_parse_speed(const char *s)
{
	char *end;
	double v = strtod(s, &end);

	if (end == s || v <= 0 || v > 1000 || strncmp(end, " GT/s", 5) != 0)
		return 0;
	return v;
}

static unsigned
le16(const unsigned char *p)
{
	return (unsigned)p[0] | (unsigned)p[1] << 8;
}

static unsigned
le32(const unsigned char *p)
{
	return le16(p) | le16(p + 2) << 16;
}

void
pci_parse_config(struct pci_dev *d, const unsigned char *cfg, size_t len)
{
	unsigned off = 0x100;

	d->acs_cap = d->acs_ctrl = d->ats_ctrl = -1;
	d->has_config = len >= 0x100 + 4;
	if (!d->has_config)
		return;
	/* extended capabilities: a chain from 0x100, each header
	 * id[15:0] version[19:16] next[31:20]; bounded against loops */
	for (int hops = 0; hops < 96 && off >= 0x100 && off + 8 <= len; hops++) {
		unsigned hdr = le32(cfg + off), id = hdr & 0xffff;
		if (hdr == 0 || hdr == 0xffffffff)
			break;
		if (id == PCI_EXT_CAP_ACS) {
			d->acs_cap = (int)le16(cfg + off + 4);
			d->acs_ctrl = (int)le16(cfg + off + 6);
		} else if (id == PCI_EXT_CAP_ATS) {
			d->ats_ctrl = (le16(cfg + off + 6) & 0x8000) != 0;
		}
		if ((hdr >> 20) == 0 || (hdr >> 20) <= off || ((hdr >> 20) & 3) != 0)
			break;
		off = hdr >> 20;
	}
}

/* The attribute files of one device, read under root. */
struct reader {
	const char *root;
	char dir[64]; /* "/sys/bus/pci/devices/0000:1b:00.0" */
	struct pci_dev *d;
};

static int
attr_line(struct reader *r, const char *name, char *out, size_t size)
{
	char path[128];

	if (str_fmt(path, sizeof(path), "%s/%s", r->dir, name) != APP_OK)
		return APP_ERANGE;
	return hostfs_read_line(r->root, path, out, size);
}

/* A hex attribute ("0x10de"); 0 and noted when missing, garbage or above max. */
static unsigned
attr_hex(struct reader *r, const char *name, unsigned max)
{
	char path[128];
	long long v;

	if (str_fmt(path, sizeof(path), "%s/%s", r->dir, name) != APP_OK ||
	    hostfs_read_long(r->root, path, 16, &v) != 0 || v < 0 || (unsigned long long)v > max) {
		note(r->d, name);
		return 0;
	}
	return (unsigned)v;
}

/* A decimal attribute; def when missing, def and noted when garbage. */
static int
attr_int(struct reader *r, const char *name, int lo, int hi, int def)
{
	char path[128];
	long long v;
	int rc;

	if (str_fmt(path, sizeof(path), "%s/%s", r->dir, name) != APP_OK ||
	    (rc = hostfs_read_long(r->root, path, 10, &v)) == APP_ENOTFOUND)
		return def;
	if (rc != 0 || v < lo || v > hi) {
		note(r->d, name);
		return def;
	}
	return (int)v;
}

static double
attr_speed(struct reader *r, const char *name)
{
	char buf[64];
	double v;

	if (attr_line(r, name, buf, sizeof(buf)) < 0)
		return 0;
	/* "Unknown" is what the kernel says for a link it cannot read */
	if ((v = pci_parse_speed(buf)) == 0 && strncmp(buf, "Unknown", 7) != 0)
		note(r->d, name);
	return v;
}

static void
attr_ifaces(struct reader *r, const char *sub, char names[][32], int *n)
{
	char path[128], **list = NULL;
	int k = 0;

	if (str_fmt(path, sizeof(path), "%s/%s", r->dir, sub) == APP_OK)
		list = hostfs_list(r->root, path, 64, &k);
	*n = 0;
	for (int i = 0; i < k && *n < PCI_MAX_IFACES; i++)
		if (strlen(list[i]) < 32)
			snprintf(names[(*n)++], 32, "%s", list[i]);
	hostfs_free_names(list, k);
}

static void
read_device(const char *root, const char *bdf, struct pci_dev *d)
{
	struct reader r = { root, "", d };
	unsigned char *cfg;
	char path[128];
	ssize_t len;

	memset(d, 0, sizeof(*d));
	snprintf(d->bdf, sizeof(d->bdf), "%s", bdf);
	snprintf(r.dir, sizeof(r.dir), "/sys/bus/pci/devices/%s", bdf);
	d->parent = -1;
	d->acs_cap = d->acs_ctrl = d->ats_ctrl = -1;
	if (hostfs_resolve(root, r.dir, d->devpath, sizeof(d->devpath)) < 0 ||
	    strncmp(d->devpath, "/sys/devices/", 13) != 0) {
		note(d, "devpath");
		d->devpath[0] = '\0';
	}
	d->vendor = attr_hex(&r, "vendor", 0xffff);
	d->device = attr_hex(&r, "device", 0xffff);
	d->class_code = attr_hex(&r, "class", 0xffffff);
	d->subsys_vendor = attr_hex(&r, "subsystem_vendor", 0xffff);
	d->subsys_device = attr_hex(&r, "subsystem_device", 0xffff);
	d->numa_node = attr_int(&r, "numa_node", -1, 1023, -1);
	d->cur_speed_gts = attr_speed(&r, "current_link_speed");
	d->max_speed_gts = attr_speed(&r, "max_link_speed");
	d->cur_width = attr_int(&r, "current_link_width", 0, 32, 0);
	d->max_width = attr_int(&r, "max_link_width", 0, 32, 0);
	attr_line(&r, "reset_method", d->reset_method, sizeof(d->reset_method));
	if (str_fmt(path, sizeof(path), "%s/driver", r.dir) == APP_OK)
		hostfs_link_name(root, path, d->driver, sizeof(d->driver));
	if (str_fmt(path, sizeof(path), "%s/resource", r.dir) == APP_OK) {
		char *text = hostfs_read_text(root, path, 4096, NULL);
		d->bars_known = text != NULL && pci_parse_resource(text, &d->bar64_bytes) == 0;
		if (text != NULL && !d->bars_known)
			note(d, "resource");
		free(text);
	}
	attr_ifaces(&r, "net", d->netdev, &d->n_netdev);
	attr_ifaces(&r, "infiniband", d->rdma, &d->n_rdma);
	if ((cfg = malloc(PCI_CFG_SIZE)) != NULL) {
		len = str_fmt(path, sizeof(path), "%s/config", r.dir) == APP_OK
			      ? hostfs_read_bytes(root, path, cfg, PCI_CFG_SIZE)
			      : APP_ERANGE;
		if (len < 64)
			note(d, "config");
		pci_parse_config(d, cfg, len < 0 ? 0 : (size_t)len);
		free(cfg);
	}
}

#define IORESOURCE_MEM 0x00000200
#define IORESOURCE_MEM_64 0x00100000

int
pci_parse_resource(const char *text, uint64_t *bytes)
{
	const char *s = text;

	*bytes = 0;
	for (int line = 0; line < 6 && *s != '\0'; line++) {
		unsigned long long start, end, flags;
		int used = 0;
		if (sscanf(s, "%llx %llx %llx%n", &start, &end, &flags, &used) != 3 || used <= 0)
			return APP_EFORMAT;
		s += used;
		while (*s == ' ' || *s == '\r')
			s++;
		if (*s != '\n' && *s != '\0')
			return APP_EFORMAT;
		s += *s == '\n';
		if ((flags & (IORESOURCE_MEM | IORESOURCE_MEM_64)) != (IORESOURCE_MEM | IORESOURCE_MEM_64) ||
		    end <= start)
			continue;
		if (end - start >= (1ULL << 50) || *bytes > (1ULL << 52))
			return APP_EFORMAT; /* larger than any device's BAR: not a real file */
		*bytes += end - start + 1;
	}
	return 0;
}

static int
cmp_bdf(const void *a, const void *b)
{
	return strcmp(((const struct pci_dev *)a)->bdf, ((const struct pci_dev *)b)->bdf);
}

int
pci_find(const struct pci_bus *bus, const char *bdf)
{
	for (int i = 0; i < bus->n; i++)
		if (strcmp(bus->dev[i].bdf, bdf) == 0)
			return i;
	return PCI_NONE;
}

/* The parent is the path component before the device's own, when it is
 * a device too ("/pci0000:15/0000:15:01.0/0000:16:00.0"). */
static void
link_parents(struct pci_bus *bus)
{
	for (int i = 0; i < bus->n; i++) {
		struct pci_dev *d = &bus->dev[i];
		char path[512], *slash;
		if (d->devpath[0] == '\0')
			continue;
		if (str_fmt(path, sizeof(path), "%s", d->devpath) != APP_OK || (slash = strrchr(path, '/')) == NULL ||
		    strcmp(slash + 1, d->bdf) != 0)
			continue;
		*slash = '\0';
		if ((slash = strrchr(path, '/')) != NULL && is_bdf(slash + 1))
			d->parent = pci_find(bus, slash + 1);
	}
	for (int i = 0; i < bus->n; i++) {
		int depth = 0;
		for (int p = bus->dev[i].parent; p >= 0 && depth <= bus->n; p = bus->dev[p].parent)
			depth++;
		bus->dev[i].depth = depth;
	}
}

int
pci_scan(const char *root, struct pci_bus *bus, char *err, size_t errsize)
{
	char **names;
	int n, listed;

	memset(bus, 0, sizeof(*bus));
	names = hostfs_list(root, "/sys/bus/pci/devices", PCI_MAX_DEVICES + 1, &listed);
	n = listed;
	if (names == NULL) {
		snprintf(bus->problem, sizeof(bus->problem), "/sys/bus/pci/devices cannot be listed");
		return 0;
	}
	if (n > PCI_MAX_DEVICES) {
		bus->truncated = 1;
		n = PCI_MAX_DEVICES;
	}
	if (n > 0 && (bus->dev = calloc((size_t)n, sizeof(*bus->dev))) == NULL) {
		hostfs_free_names(names, listed);
		snprintf(err, errsize, "out of memory reading %d PCI devices", n);
		return APP_ENOMEM;
	}
	for (int i = 0; i < n; i++)
		if (is_bdf(names[i]))
			read_device(root, names[i], &bus->dev[bus->n++]);
	hostfs_free_names(names, listed);
	qsort(bus->dev, (size_t)bus->n, sizeof(*bus->dev), cmp_bdf);
	link_parents(bus);
	return 0;
}

void
pci_free(struct pci_bus *bus)
{
	free(bus->dev);
	memset(bus, 0, sizeof(*bus));
}

int
pci_is_gpu(const struct pci_dev *d)
{
	unsigned c = d->class_code >> 8;

	return d->vendor == PCI_VENDOR_NVIDIA && (c == PCI_CLASS_DISPLAY_3D || c == PCI_CLASS_DISPLAY_VGA);
}

int
pci_is_nvswitch(const struct pci_dev *d)
{
	return d->vendor == PCI_VENDOR_NVIDIA && d->class_code >> 8 == PCI_CLASS_BRIDGE_OTHER;
}

int
pci_is_nic(const struct pci_dev *d)
{
	unsigned c = d->class_code >> 8;

	return c == PCI_CLASS_NET_ETHERNET || c == PCI_CLASS_NET_INFINIBAND;
}

int
pci_is_bridge(const struct pci_dev *d)
{
	return d->class_code >> 8 == PCI_CLASS_BRIDGE_PCI;
}
