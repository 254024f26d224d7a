/*
 * RDMA ports through libibverbs, on the live host: the same devices
 * sysfs shows, as the verbs consumers (NCCL's IB transport, perftest)
 * will see them.  A port's rate is its lane speed times its width.
 */
#include <endian.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <string.h>

#include "status.h"
#include "strfmt.h"
#include "fabric.h"

/* ibv_port_attr.active_speed (Gb/s per lane x 10) */
static int
lane_speed_x10(uint8_t s)
{
	switch (s) {
	case 1:
		return 25; /* SDR */
	case 2:
		return 50; /* DDR */
	case 4:
	case 8:
		return 100; /* QDR, FDR10 */
	case 16:
		return 140; /* FDR */
	case 32:
		return 250; /* EDR */
	case 64:
		return 500; /* HDR */
	case 128:
		return 1000; /* NDR */
	default:
		return 0;
	}
}

static int
lanes(uint8_t w)
{
	switch (w) {
	case 1:
		return 1;
	case 2:
		return 4;
	case 4:
		return 8;
	case 8:
		return 12;
	case 16:
		return 2;
	default:
		return 0;
	}
}

static const char *
state_name(enum ibv_port_state s)
{
	switch (s) {
	case IBV_PORT_DOWN:
		return "DOWN";
	case IBV_PORT_INIT:
		return "INIT";
	case IBV_PORT_ARMED:
		return "ARMED";
	case IBV_PORT_ACTIVE:
		return "ACTIVE";
	case IBV_PORT_ACTIVE_DEFER:
		return "ACTIVE_DEFER";
	default:
		return "NOP";
	}
}

static void
fill_port(struct ibv_context *ctx, int num, struct rdma_port *p)
{
	struct ibv_port_attr pa;
	int rate;

	memset(p, 0, sizeof(*p));
	p->num = num;
	p->state = -1;
	p->rate_mbps = -1;
	if (ibv_query_port(ctx, (uint8_t)num, &pa) != 0)
		return;
	p->state = pa.state;
	snprintf(p->state_name, sizeof(p->state_name), "%s", state_name(pa.state));
	rate = lane_speed_x10(pa.active_speed) * lanes(pa.active_width);
	if (rate > 0) {
		p->rate_mbps = (long long)rate * 100;
		snprintf(p->rate, sizeof(p->rate), "%d%s Gb/sec", rate / 10, rate % 10 ? ".5" : "");
	}
	snprintf(p->link_layer, sizeof(p->link_layer), "%s",
		 pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand");
}

static void
fill_dev(struct ibv_device *dev, struct rdma_dev *r)
{
	struct ibv_context *ctx = ibv_open_device(dev);
	struct ibv_device_attr da;

	if (ctx == NULL) {
		snprintf(r->problem, sizeof(r->problem), "libibverbs cannot open it: %s", strerror(errno));
		return;
	}
	if (ibv_query_device(ctx, &da) == 0) {
		r->node_guid = be64toh(da.node_guid);
		r->sys_image_guid = be64toh(da.sys_image_guid);
		if (str_fmt(r->fw_ver, sizeof(r->fw_ver), "%s", da.fw_ver) != APP_OK)
			r->fw_ver[0] = '\0'; /* a version cut short would be another version */
		r->n_ports = da.phys_port_cnt < RDMA_MAX_PORTS ? da.phys_port_cnt : RDMA_MAX_PORTS;
		for (int p = 0; p < r->n_ports; p++)
			fill_port(ctx, p + 1, &r->port[p]);
		r->problem[0] = '\0';
	} else {
		snprintf(r->problem, sizeof(r->problem), "ibv_query_device: %s", strerror(errno));
	}
	ibv_close_device(ctx);
}

int
rdma_verbs_fill(struct fabric *f, char *why, size_t size)
{
	struct ibv_device **list;
	int n = 0;

	errno = 0;
	list = ibv_get_device_list(&n);
	if (list == NULL) {
		snprintf(why, size, "libibverbs lists no devices (%s): no RDMA subsystem in this kernel",
			 errno ? strerror(errno) : "no error given");
		return APP_EUNAVAIL;
	}
	for (int i = 0; i < n; i++) {
		const char *name = ibv_get_device_name(list[i]);
		for (int k = 0; name != NULL && k < f->topo.n_nics; k++)
			if (strcmp(f->nic_rdma[k].name, name) == 0)
				fill_dev(list[i], &f->nic_rdma[k]);
	}
	ibv_free_device_list(list);
	why[0] = '\0';
	return 0;
}
