/* Fabric validation: the tools' output, the pass marks, the hints (validate.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostfs.h"
#include "nvidia.h"
#include "status.h"
#include "validate.h"

static int
bad(char *why, size_t size, const char *msg)
{
	snprintf(why, size, "%s", msg);
	return APP_EFORMAT;
}

/* Up to max numbers of a line; how many, -1 when something else is on it. */
static int
numbers(const char *line, double *v, int max)
{
	int n = 0;
	const char *s = line;

	while (*s != '\0' && *s != '\n') {
		char *end;
		while (*s == ' ' || *s == '\t')
			s++;
		if (*s == '\0' || *s == '\n')
			break;
		double x = strtod(s, &end);
		if (end == s || (*end != ' ' && *end != '\t' && *end != '\n' && *end != '\0'))
			return -1;
		if (n < max)
			v[n] = x;
		n++;
		s = end;
	}
	return n;
}

int
validate_parse_ib_bw(const char *text, double *gbits, char *why, size_t size)
{
	const char *head = strstr(text, "BW average[");
	double v[8];
	int mbytes;

	if (head == NULL)
		return bad(why, size, "no result table (no 'BW average' header): the test did not run to its end");
	mbytes = strncmp(head + 11, "MB/sec]", 7) == 0;
	if (!mbytes && strncmp(head + 11, "Gb/sec]", 7) != 0)
		return bad(why, size, "the bandwidth is in a unit other than Gb/sec or MB/sec");
	for (const char *s = strchr(head, '\n'); s != NULL; s = strchr(s, '\n')) {
		s++;
		int n = numbers(s, v, 8);
		/* #bytes #iterations BW-peak BW-average MsgRate */
		if (n == 5) {
			if (!(v[3] >= 0) || !isfinite(v[3]) || v[3] > 1e5 * (mbytes ? 125 : 1))
				return bad(why, size, "the average bandwidth is not a plausible figure");
			*gbits = mbytes ? v[3] * 8 / 1000 : v[3];
			return 0;
		}
	}
	return bad(why, size, "the result table has no row of 5 numbers");
}

int
validate_parse_nccl(const char *text, double *busbw, long long *largest, int *wrong, char *why, size_t size)
{
	double v[16];
	int rows = 0;

	*largest = -1;
	*wrong = 0;
	for (const char *s = text; s != NULL && *s != '\0'; s = strchr(s, '\n'), s = s ? s + 1 : NULL) {
		const char *p = s;
		while (*p == ' ')
			p++;
		if (*p == '#' || *p == '\n' || *p == '\0')
			continue;
		/* size count type redop root time algbw busbw #wrong (out of place), then in place: the
		 * type and redop are words, so the numbers are read around them */
		char type[16], redop[16];
		long long bytes, count;
		int used = 0;
		if (sscanf(p, "%lld %lld %15s %15s %n", &bytes, &count, type, redop, &used) != 4 || used == 0)
			return bad(why, size,
				   "a result row is not 'size count type redop root time algbw busbw #wrong'");
		int n = numbers(p + used, v, 16);
		if (n < 5 || bytes < 0 || !(v[3] >= 0) || !isfinite(v[3]) || v[3] > 1e5)
			return bad(why, size, "a result row's numbers are missing or not plausible");
		rows++;
		*wrong += v[4] != 0 || (n >= 9 && v[8] != 0);
		if (bytes > *largest) {
			*largest = bytes;
			*busbw = v[3];
		}
	}
	if (rows == 0)
		return bad(why, size, "no result row");
	return 0;
}

double
validate_nvlink_reference(const struct fabric *f)
{
	const struct topo *t = &f->topo;
	const struct nvidia_gpu_model *m = t->n_gpus > 0 ? nvidia_gpu_model(t->bus.dev[t->gpu[0]].device) : NULL;

	if (m == NULL || !m->sxm || t->n_nvswitches == 0)
		return 0;
	/* nccl-tests all_reduce_perf on 8-GPU boards, large messages: NVLink 4 (H100, H200) ~480 GB/s,
	 * NVLink 3 (A100) ~230 GB/s */
	return m->sm >= 90 ? 480 : 230;
}

static cJSON *
result(cJSON *tests, const char *kind, const char *name, const char *state)
{
	cJSON *o = cJSON_CreateObject();

	cJSON_AddStringToObject(o, "kind", kind);
	cJSON_AddStringToObject(o, "name", name);
	cJSON_AddStringToObject(o, "state", state);
	cJSON_AddItemToArray(tests, o);
	return o;
}

/* Figures to two decimals (non-negative by then): what the report shows. */
static double
two_places(double x)
{
	return (double)(long long)(x * 100 + 0.5) / 100;
}

cJSON *
validate_result(cJSON *tests, const char *kind, const char *name, double measured, const char *unit, double mark,
		const char *mark_why)
{
	cJSON *o = result(tests, kind, name, mark <= 0 ? "no-mark" : measured >= mark ? "pass" : "fail");

	cJSON_AddNumberToObject(o, "measured", two_places(measured));
	cJSON_AddStringToObject(o, "unit", unit);
	if (mark > 0)
		cJSON_AddNumberToObject(o, "mark", two_places(mark));
	else
		cJSON_AddNullToObject(o, "mark");
	cJSON_AddStringToObject(o, "mark_why", mark_why);
	cJSON_AddItemToObject(o, "hints", cJSON_CreateArray());
	return o;
}

cJSON *
validate_not_run(cJSON *tests, const char *kind, const char *name, const char *state, const char *why)
{
	cJSON *o = result(tests, kind, name, state);

	cJSON_AddStringToObject(o, "why", why);
	cJSON_AddItemToObject(o, "hints", cJSON_CreateArray());
	return o;
}

static void
hint(cJSON *hints, const char *s)
{
	cJSON_AddItemToArray(hints, cJSON_CreateString(s));
}

/* A NIC's interface MTU, 0 unknown. */
static int
nic_mtu(const struct fabric *f, int k)
{
	const struct pci_dev *d = &f->topo.bus.dev[f->topo.nic[k]];
	char path[96];
	long long v;

	if (d->n_netdev == 0)
		return 0;
	snprintf(path, sizeof(path), "/sys/class/net/%s/mtu", d->netdev[0]);
	return hostfs_read_long(f->root, path, 10, &v) == 0 && v > 0 && v < 1 << 20 ? (int)v : 0;
}

void
validate_rdma_hints(const struct fabric *f, int a, int b, int gdr, cJSON *hints)
{
	const int nics[2] = { a, b };
	char s[320];

	for (int i = 0; i < 2; i++) {
		const struct rdma_dev *r = &f->nic_rdma[nics[i]];
		const struct pci_dev *d = &f->topo.bus.dev[f->topo.nic[nics[i]]];
		int roce = r->n_ports > 0 && strcmp(r->port[0].link_layer, "Ethernet") == 0, mtu = nic_mtu(f, nics[i]);
		if (roce && mtu > 0 && mtu < 9000) {
			snprintf(s, sizeof(s),
				 "MTU: %s (%s) has MTU %d; RoCE wants 9000 (jumbo frames) on the interface and every "
				 "switch port: ip link set %s mtu 9000",
				 r->name, d->n_netdev ? d->netdev[0] : "?", mtu, d->n_netdev ? d->netdev[0] : "IFACE");
			hint(hints, s);
		}
		if (roce) {
			snprintf(s, sizeof(s),
				 "PFC: RoCE needs a lossless class: PFC on the RDMA priority (3 by convention) and ECN "
				 "on %s and its switch port (mlnx_qos -i %s --pfc 0,0,0,1,0,0,0,0)",
				 r->name, d->n_netdev ? d->netdev[0] : "IFACE");
			hint(hints, s);
		}
		if (d->cur_width > 0 && d->max_width > 0 &&
		    (d->cur_width < d->max_width || d->cur_speed_gts < d->max_speed_gts)) {
			snprintf(s, sizeof(s), "PCIe: %s trained at x%d %.1f GT/s of x%d %.1f GT/s: reseat it", d->bdf,
				 d->cur_width, d->cur_speed_gts, d->max_width, d->max_speed_gts);
			hint(hints, s);
		}
		if (gdr && d->ats_ctrl != 1) {
			snprintf(s, sizeof(s),
				 "ATS/ACS: %s has ATS %s; with ACS redirect on its switch port, GPU-to-NIC transfers "
				 "climb to the root complex: mlxconfig -d %s set ATS_ENABLED=true, and ACS Direct "
				 "Translated P2P on the switch ports",
				 r->name, d->ats_ctrl == 0 ? "off" : "missing", d->bdf);
			hint(hints, s);
		}
	}
	if (gdr)
		hint(hints, "GDR level: GPUDirect RDMA pays only where GPU and NIC share a PCIe switch "
			    "(NCCL_NET_GDR_LEVEL=PIX in /etc/privai/nccl.env, privai-fabric discover shows the pairs)");
	hint(hints, "the link itself: ibstat shows the port's rate and state; a port below its rated speed points at "
		    "the cable or the switch port");
}

void
validate_nccl_hints(const struct fabric *f, int across_nodes, cJSON *hints)
{
	if (!across_nodes) {
		if (f->topo.n_nvswitches > 0)
			hint(hints, "Fabric Manager: without it the NVSwitches carry nothing and NCCL falls back to "
				    "PCIe (privai-fabric fm status)");
		hint(hints, "NVLink: nvidia-smi nvlink -s lists each link's speed; a link down halves a ring");
		hint(hints, "P2P: NCCL_P2P_LEVEL=NVL in /etc/privai/nccl.env keeps peer-to-peer on NVLink; in a VM, "
			    "ACS on the host (privai-fabric vmclass)");
		return;
	}
	hint(hints, "NICs: NCCL_IB_HCA in /etc/privai/nccl.env should list every GPU's own NIC "
		    "(privai-fabric nccl-env)");
	if (!f->peermem)
		hint(hints, "peer memory: nvidia_peermem is not loaded, so every byte is staged through host memory: "
			    "modprobe nvidia_peermem");
	hint(hints, "GDR level and ATS/ACS: GPUDirect RDMA where GPU and NIC share a switch, with ATS on the NICs "
		    "and ACS Direct Translated P2P on the switch ports");
	hint(hints, "RoCE: MTU 9000 and PFC/ECN on every hop, NCCL_IB_GID_INDEX on the RoCE v2 GID");
}
