/*
 * The PCI devices of a host, read from sysfs under a root prefix: ids
 * and class, NUMA node, link speed and width against capability, reset
 * methods, bound driver, the bridge each hangs under (from the device's
 * place in /sys/devices), the network and RDMA interfaces on it, and,
 * from config space, the ACS and ATS controls that decide whether
 * peer-to-peer traffic goes straight through a PCIe switch.
 *
 * A file that is missing or holds garbage leaves its field unknown and
 * is noted in the device's `problem`; scanning never fails on one device.
 */
#ifndef PRIVAI_PCI_H
#define PRIVAI_PCI_H

#include <stdint.h>

#define PCI_MAX_DEVICES 1024
#define PCI_NONE (-1) /* a device index for none: a root bus's parent, a switch not found */
#define PCI_MAX_IFACES 4

/* class codes (24 bits: class, subclass, programming interface) */
#define PCI_CLASS_BRIDGE_PCI 0x0604
#define PCI_CLASS_BRIDGE_OTHER 0x0680 /* NVSwitch */
#define PCI_CLASS_NET_ETHERNET 0x0200
#define PCI_CLASS_NET_INFINIBAND 0x0207
#define PCI_CLASS_DISPLAY_VGA 0x0300
#define PCI_CLASS_DISPLAY_3D 0x0302

#define PCI_VENDOR_NVIDIA 0x10de
#define PCI_VENDOR_MELLANOX 0x15b3

/* ACS control bits (PCIe base spec, ACS extended capability) */
#define PCI_ACS_SV 0x0001 /* source validation */
#define PCI_ACS_TB 0x0002 /* translation blocking */
#define PCI_ACS_RR 0x0004 /* P2P request redirect */
#define PCI_ACS_CR 0x0008 /* P2P completion redirect */
#define PCI_ACS_UF 0x0010 /* upstream forwarding */
#define PCI_ACS_EC 0x0020 /* P2P egress control */
#define PCI_ACS_DT 0x0040 /* direct translated P2P */

struct pci_dev {
	char bdf[16];            /* "0000:1b:00.0" */
	unsigned vendor, device; /* 0 when unreadable */
	unsigned subsys_vendor, subsys_device;
	unsigned class_code;                 /* 24 bits; 0 when unreadable */
	int numa_node;                       /* -1: none reported */
	double cur_speed_gts, max_speed_gts; /* GT/s; 0 unknown */
	int cur_width, max_width;            /* lanes; 0 unknown */
	char reset_method[64];               /* "flr bus", "" when the kernel does not say */
	char driver[32];                     /* "" when none is bound */
	char devpath[512];                   /* under /sys/devices, e.g. "/pci0000:15/0000:15:01.0/0000:16:00.0" */
	int parent;                          /* index of the bridge above, PCI_NONE at a root bus */
	int depth;                           /* bridges above it */
	int has_config;                      /* config space readable past the header */
	int acs_cap, acs_ctrl;               /* -1: no ACS capability */
	int ats_ctrl;                        /* -1: no ATS capability; else 1 enabled, 0 disabled */
	int bars_known;                      /* `resource` read: bar64_bytes holds */
	uint64_t bar64_bytes;                /* the sizes of its 64-bit memory BARs (0-5), added up */
	int n_netdev, n_rdma;
	char netdev[PCI_MAX_IFACES][32]; /* "ens21f0np0" */
	char rdma[PCI_MAX_IFACES][32];   /* "mlx5_0" */
	char problem[160];               /* what could not be read, space separated */
};

struct pci_bus {
	int n;
	struct pci_dev *dev; /* sorted by bdf */
	int truncated;       /* more than PCI_MAX_DEVICES */
	char problem[160];   /* the bus itself could not be listed */
};

/* Read every device under root.  0, or an APP_E* code with err when memory ran out;
 * an unreadable /sys/bus/pci is an empty bus with `problem` set. */
int pci_scan(const char *root, struct pci_bus *bus, char *err, size_t errsize);
void pci_free(struct pci_bus *bus);

int pci_find(const struct pci_bus *bus, const char *bdf);
int pci_is_gpu(const struct pci_dev *d); /* an NVIDIA display or 3D controller */
int pci_is_nvswitch(const struct pci_dev *d);
int pci_is_nic(const struct pci_dev *d); /* Ethernet or InfiniBand controller */
int pci_is_bridge(const struct pci_dev *d);

/* The 64-bit memory BARs of a sysfs `resource` file ("start end flags"
 * a line: BARs 0-5, the ROM, then bridge and SR-IOV windows), added up.
 * 0 with *bytes set, or APP_EFORMAT. */
int pci_parse_resource(const char *text, uint64_t *bytes);

/* Decode a PCI config space image (as sysfs's `config` holds it) into
 * d's acs_* and ats_ctrl fields; exposed for tests. */
void pci_parse_config(struct pci_dev *d, const unsigned char *cfg, size_t len);

/* "32.0 GT/s PCIe" -> 32.0; 0 when not a speed. */
double pci_parse_speed(const char *s);

#endif
