/*
 * RDMA devices as the kernel's ib_core shows them in sysfs
 * (/sys/class/infiniband/NAME): node and system-image GUIDs, firmware,
 * and per port the state, physical state, rate and link layer.  This is
 * what libibverbs itself reads to enumerate devices; privai-fabric asks
 * libibverbs on a live host and reads sysfs under a root prefix in tests.
 */
#ifndef PRIVAI_RDMA_H
#define PRIVAI_RDMA_H

#include <stdint.h>

#define RDMA_MAX_PORTS 4

struct rdma_port {
	int num;             /* 1-based, as verbs number them */
	int state;           /* enum ibv_port_state: 4 ACTIVE; -1 unknown */
	char state_name[16]; /* "ACTIVE", "DOWN", ... */
	char phys_state[24]; /* "LinkUp", "Polling", ... */
	long long rate_mbps; /* -1 unknown */
	char rate[48];       /* "400 Gb/sec (4X NDR)" */
	char link_layer[16]; /* "InfiniBand", "Ethernet" */
};

struct rdma_dev {
	char name[32];                      /* "mlx5_0" */
	uint64_t node_guid, sys_image_guid; /* 0 unknown */
	char fw_ver[32];
	int n_ports;
	struct rdma_port port[RDMA_MAX_PORTS];
	char problem[160]; /* what could not be read, space separated */
};

/* Read device `name` under root.  Never fails: what cannot be read stays
 * unknown and is named in `problem`. */
void rdma_read_sysfs(const char *root, const char *name, struct rdma_dev *d);

/* "b83f:d203:00aa:0000" -> 0xb83fd20300aa0000.  0, or an APP_E* code when malformed. */
int rdma_parse_guid(const char *s, uint64_t *v);

/* "400 Gb/sec (4X NDR)" -> 400000, "2.5 Gb/sec (1X SDR)" -> 2500; APP_EFORMAT when not a rate. */
long long rdma_parse_rate(const char *s);

/* "4: ACTIVE" -> 4 and "ACTIVE"; APP_EFORMAT when malformed. */
int rdma_parse_state(const char *s, char *name, size_t size);

#endif
