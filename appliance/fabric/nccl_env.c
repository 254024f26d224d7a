/* The NCCL environment of the engine ranks, from discovery (nccl_env.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "hostfs.h"
#include "nccl_env.h"

#define GID_MAX 16 /* GID table entries looked at: RoCE v2 over IPv4 is index 3 on mlx5 */

static struct nccl_setting *add(struct nccl_env *e, const char *name, const char *value, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static struct nccl_setting *
add(struct nccl_env *e, const char *name, const char *value, const char *fmt, ...)
{
	struct nccl_setting *s = &e->s[e->n++];
	va_list ap;

	snprintf(s->name, sizeof(s->name), "%s", name);
	snprintf(s->value, sizeof(s->value), "%s", value);
	va_start(ap, fmt);
	vsnprintf(s->why, sizeof(s->why), fmt, ap);
	va_end(ap);
	return s;
}

/* Append to a buffer, never past its end. */
static void cat(char *buf, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void
cat(char *buf, size_t size, const char *fmt, ...)
{
	size_t len = strlen(buf);
	va_list ap;

	if (len + 1 >= size)
		return;
	va_start(ap, fmt);
	vsnprintf(buf + len, size - len, fmt, ap);
	va_end(ap);
}

/* The first ACTIVE port of a NIC's RDMA device, or NULL. */
static const struct rdma_port *
active_port(const struct rdma_dev *r)
{
	for (int p = 0; p < r->n_ports; p++)
		if (r->port[p].state == 4)
			return &r->port[p];
	return NULL;
}

/* The NICs NCCL should use: each GPU's paired NIC, once, with an RDMA
 * device and an active port.  Fills NCCL_IB_HCA; returns how many, and
 * in *roce whether any runs RDMA over Ethernet. */
static int
ib_hca(const struct fabric *f, struct nccl_env *e, int *roce, int used[TOPO_MAX_NICS])
{
	const struct topo *t = &f->topo;
	char value[256] = "", why[512] = "", skipped[256] = "";
	int n = 0;

	*roce = 0;
	for (int g = 0; g < t->n_gpus; g++) {
		int k = t->gpu_nic[g];
		if (k < 0) {
			cat(skipped, sizeof(skipped), "%sGPU%d (no NIC of its own)", skipped[0] ? ", " : "", g);
			continue;
		}
		if (used[k] || f->nic_rdma[k].name[0] == '\0')
			continue;
		const struct rdma_port *p = active_port(&f->nic_rdma[k]);
		if (p == NULL) {
			cat(skipped, sizeof(skipped), "%s%s (GPU%d's: no active port)", skipped[0] ? ", " : "",
			    f->nic_rdma[k].name, g);
			used[k] = -1;
			continue;
		}
		used[k] = 1;
		*roce |= strcmp(p->link_layer, "Ethernet") == 0;
		cat(value, sizeof(value), "%s%s:%d", n ? "," : "=", f->nic_rdma[k].name, p->num);
		cat(why, sizeof(why), "%sGPU%d-%s%s", n ? ", " : "", g, f->nic_rdma[k].name,
		    t->gpu_pairing[g] == TOPO_PAIR_SWITCH ? " (same PCIe switch)" : " (same NUMA node)");
		n++;
	}
	if (n == 0) {
		add(e, "NCCL_IB_HCA", "",
		    "no GPU has a paired RDMA NIC with an active port%s%s: between nodes NCCL falls back to TCP "
		    "sockets, a fraction of what RDMA gives (privai-fabric discover shows the pairing)",
		    skipped[0] ? "; left out: " : "", skipped);
		return 0;
	}
	add(e, "NCCL_IB_HCA", value,
	    "the RDMA NICs paired with the GPUs, on their active ports: %s%s%s; '=' makes the names exact "
	    "(mlx5_1 would also match mlx5_10)",
	    why, skipped[0] ? "; left out: " : "", skipped);
	return n;
}

/* The GID index of RoCE v2 on an IPv4 address for one NIC port: -1 none,
 * else the index (an IPv6 one when no IPv4 is configured, *v6 set). */
static int
roce_v2_gid(const char *root, const char *dev, int port, int *v6)
{
	char path[256], line[128];
	int any = -1;

	*v6 = 0;
	for (int i = 0; i < GID_MAX; i++) {
		snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/%d/gid_attrs/types/%d", dev, port, i);
		if (hostfs_read_line(root, path, line, sizeof(line)) != 0 || strcmp(line, "RoCE v2") != 0)
			continue;
		snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/%d/gids/%d", dev, port, i);
		if (hostfs_read_line(root, path, line, sizeof(line)) != 0 ||
		    strcmp(line, "0000:0000:0000:0000:0000:0000:0000:0000") == 0)
			continue;
		if (strncmp(line, "0000:0000:0000:0000:0000:ffff:", 30) == 0)
			return i;
		if (any < 0 && strncmp(line, "fe80:", 5) != 0)
			any = i;
	}
	*v6 = any >= 0;
	return any;
}

static void
gid_index(const struct fabric *f, const int used[TOPO_MAX_NICS], struct nccl_env *e)
{
	char seen[256] = "";
	int index = -1, differ = 0, v6 = 0;

	for (int k = 0; k < f->topo.n_nics; k++) {
		const struct rdma_port *p = used[k] == 1 ? active_port(&f->nic_rdma[k]) : NULL;
		int this_v6;
		if (p == NULL || strcmp(p->link_layer, "Ethernet") != 0)
			continue;
		int i = roce_v2_gid(f->root, f->nic_rdma[k].name, p->num, &this_v6);
		cat(seen, sizeof(seen), "%s%s:%d %d", seen[0] ? ", " : "", f->nic_rdma[k].name, p->num, i);
		if (i < 0) {
			add(e, "NCCL_IB_GID_INDEX", "",
			    "%s port %d runs RoCE but has no RoCE v2 GID with an address: give its interface an IP "
			    "address (and the switches PFC/ECN for lossless RoCE), then run privai-fabric nccl-env "
			    "again",
			    f->nic_rdma[k].name, p->num);
			return;
		}
		differ |= index >= 0 && i != index;
		v6 |= this_v6;
		index = index < 0 ? i : index;
	}
	if (index < 0)
		return; /* InfiniBand: the GID index does not apply */
	char value[16];
	snprintf(value, sizeof(value), "%d", index);
	if (differ)
		add(e, "NCCL_IB_GID_INDEX", "",
		    "the RoCE NICs have their RoCE v2 GID at different indexes (%s): NCCL takes one for all, so it "
		    "is left to NCCL's own choice; give the interfaces their addresses in the same order",
		    seen);
	else
		add(e, "NCCL_IB_GID_INDEX", value,
		    "RoCE: the GID of RoCE v2 (routable, UDP) with an %s address on every NIC used (%s); NCCL's "
		    "default may pick RoCE v1 or a link-local GID that does not cross a router",
		    v6 ? "IPv6" : "IPv4", seen);
}

static void
gdr_level(const struct fabric *f, int nics, struct nccl_env *e)
{
	const struct topo *t = &f->topo;
	int switched = 0, paired = 0;

	if (nics == 0)
		return;
	for (int g = 0; g < t->n_gpus; g++) {
		paired += t->gpu_nic[g] >= 0;
		switched += t->gpu_pairing[g] == TOPO_PAIR_SWITCH;
	}
	if (!f->peermem)
		add(e, "NCCL_NET_GDR_LEVEL", "",
		    "nvidia_peermem is not loaded, so NICs cannot read GPU memory through it; NCCL uses GPUDirect "
		    "RDMA only where the driver offers DMA-BUF, else stages through host memory. Load it "
		    "(modprobe nvidia_peermem, and list it in /etc/modules-load.d) for GPUDirect RDMA");
	else if (switched == paired && paired > 0)
		add(e, "NCCL_NET_GDR_LEVEL", "PIX",
		    "every GPU has its NIC under the same PCIe switch (%d of %d), and nvidia_peermem is loaded: "
		    "GPUDirect RDMA through the switch, never through the CPU",
		    switched, t->n_gpus);
	else
		add(e, "NCCL_NET_GDR_LEVEL", "PXB",
		    "%d of %d GPUs meet their NIC only at the CPU: GPUDirect RDMA through the root complex is "
		    "often slower than staging through host memory, so only where PCIe switches join them",
		    paired - switched, paired);
}

static void
p2p_level(const struct fabric *f, struct nccl_env *e)
{
	const struct topo *t = &f->topo;

	if (t->n_gpus < 2)
		return;
	if (t->n_nvswitches > 0)
		add(e, "NCCL_P2P_LEVEL", "NVL",
		    "%d NVSwitches join the GPUs: peer-to-peer over NVLink only, never a PCIe path that would "
		    "stand in were NVLink down (Fabric Manager stopped), which the status reports instead",
		    t->n_nvswitches);
	else if (t->virtual_pcie && f->cpu.guest)
		add(e, "NCCL_P2P_LEVEL", "LOC",
		    "a VM with no NVLink: PCIe peer-to-peer between passed-through GPUs crosses the host's ACS "
		    "redirection and hangs or corrupts unless the host is set for it (privai-fabric vmclass); "
		    "through host memory instead");
	else
		add(e, "NCCL_P2P_LEVEL", "", "PCIe GPUs on bare metal: NCCL's own choice from the PCIe tree");
}

/* The interface of the host's default route, or "".  PID 1's view first:
 * privai-fabric serve runs in a network namespace of its own
 * (PrivateNetwork=), whose /proc/net has only loopback. */
static void
default_route_ifname(const char *root, char *out, size_t size)
{
	char *text = hostfs_read_text(root, "/proc/1/net/route", 1 << 20, NULL), *save = NULL;

	out[0] = '\0';
	if (text == NULL)
		text = hostfs_read_text(root, "/proc/net/route", 1 << 20, NULL);
	if (text == NULL)
		return;
	for (char *line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
		char ifname[32], dest[16], gw[16], mask[16];
		unsigned flags;
		if (sscanf(line, "%31s %15s %15s %x %*s %*s %*s %15s", ifname, dest, gw, &flags, mask) == 5 &&
		    strcmp(dest, "00000000") == 0 && strcmp(mask, "00000000") == 0 && (flags & 1) != 0) {
			snprintf(out, size, "%s", ifname);
			break;
		}
	}
	free(text);
}

static void
socket_ifname(const struct fabric *f, struct nccl_env *e)
{
	char ifname[32], value[40];

	default_route_ifname(f->root, ifname, sizeof(ifname));
	if (ifname[0] != '\0') {
		snprintf(value, sizeof(value), "=%s", ifname);
		add(e, "NCCL_SOCKET_IFNAME", value,
		    "the interface of this node's default route: the ranks of a group find each other (NCCL's "
		    "bootstrap) over it; '=' makes the name exact");
	} else {
		add(e, "NCCL_SOCKET_IFNAME", "^lo,docker",
		    "no default route in /proc/net/route: any interface but loopback and Docker's bridges");
	}
}

void
nccl_env_build(const struct fabric *f, const char *topo_file, struct nccl_env *e)
{
	int used[TOPO_MAX_NICS] = { 0 }, roce = 0, nics;

	memset(e, 0, sizeof(*e));
	nics = ib_hca(f, e, &roce, used);
	if (roce)
		gid_index(f, used, e);
	gdr_level(f, nics, e);
	p2p_level(f, e);
	socket_ifname(f, e);
	if (f->topo.virtual_pcie && f->cpu.guest && f->topo.n_gpus > 0 && hostfs_exists(f->root, topo_file))
		add(e, "NCCL_TOPO_FILE", topo_file,
		    "a VM: the PCIe tree NCCL sees is virtual, and this file (privai-fabric topology --write) says "
		    "which NIC sits by which GPU on the host");
	else if (f->topo.virtual_pcie && f->cpu.guest && f->topo.n_gpus > 0)
		add(e, "NCCL_TOPO_FILE", "",
		    "a VM: the PCIe tree NCCL sees is virtual, so NCCL needs the topology file, and %s is missing: "
		    "run privai-fabric topology --write %s",
		    topo_file, topo_file);
	else
		add(e, "NCCL_TOPO_FILE", "", "not a VM: NCCL reads the real PCIe tree itself");
}

/* A reason as comment lines of at most about 76 columns. */
static void
comment(FILE *fp, const char *why)
{
	const char *s = why;

	while (*s != '\0') {
		size_t n = strlen(s);
		if (n > 74) {
			n = 74;
			while (n > 30 && s[n] != ' ')
				n--;
		}
		fprintf(fp, "# %.*s\n", (int)n, s);
		s += n;
		while (*s == ' ')
			s++;
	}
}

char *
nccl_env_render(const struct nccl_env *e)
{
	char *text = NULL;
	size_t len = 0;
	FILE *fp = open_memstream(&text, &len);

	if (fp == NULL)
		return NULL;
	fprintf(fp,
		"%s.\n# privai-fabric serve rewrites it while this first line stays; remove the line to keep\n"
		"# your own edits.  A variable set in an engine's environment wins over this file.\n",
		NCCL_ENV_HEADER);
	for (int i = 0; i < e->n; i++) {
		fputc('\n', fp);
		comment(fp, e->s[i].why);
		if (e->s[i].value[0] != '\0')
			fprintf(fp, "%s=%s\n", e->s[i].name, e->s[i].value);
		else
			fprintf(fp, "# %s not set\n", e->s[i].name);
	}
	if (fclose(fp) != 0) {
		free(text);
		return NULL;
	}
	return text;
}

cJSON *
nccl_env_json(const struct nccl_env *e)
{
	cJSON *a = cJSON_CreateArray();

	for (int i = 0; i < e->n; i++) {
		cJSON *o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "name", e->s[i].name);
		if (e->s[i].value[0] != '\0')
			cJSON_AddStringToObject(o, "value", e->s[i].value);
		else
			cJSON_AddNullToObject(o, "value");
		cJSON_AddStringToObject(o, "why", e->s[i].why);
		cJSON_AddItemToArray(a, o);
	}
	return a;
}
