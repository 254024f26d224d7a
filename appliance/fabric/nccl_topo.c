/* Writing NCCL's topology file. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "nccl_topo.h"
#include "nvidia.h"

#define MAX_CPUS 8192

struct writer {
	const struct fabric *f;
	FILE *out;
	int vswitch; /* virtual switches made so far */
	int net_dev; /* net elements written, in NIC order */
};

/* "0-3,8" -> the kernel's cpumap: 32-bit hex words, most significant first. */
static int
cpulist_to_mask(const char *list, char *out, size_t size)
{
	static unsigned char bits[MAX_CPUS];
	int hi = -1;
	const char *p = list;

	memset(bits, 0, sizeof(bits));
	while (*p) {
		char *end;
		long a = strtol(p, &end, 10), b = a;
		if (end == p || a < 0 || a >= MAX_CPUS)
			return APP_EFORMAT;
		p = end;
		if (*p == '-') {
			b = strtol(p + 1, &end, 10);
			if (end == p + 1 || b < a || b >= MAX_CPUS)
				return APP_EFORMAT;
			p = end;
		}
		for (long c = a; c <= b; c++)
			bits[c] = 1;
		if (b > hi)
			hi = (int)b;
		if (*p == ',')
			p++;
		else if (*p != '\0')
			return APP_EFORMAT;
	}
	if (hi < 0)
		return APP_EFORMAT;
	out[0] = '\0';
	for (int w = hi / 32; w >= 0; w--) {
		unsigned word = 0;
		size_t n = strlen(out);
		for (int i = 0; i < 32; i++)
			word |= (unsigned)bits[w * 32 + i] << i;
		if (n + 10 > size)
			return APP_EFORMAT;
		snprintf(out + n, size - n, "%s%08x", n ? "," : "", word);
	}
	return 0;
}

static const char *
numa_cpulist(const struct fabric *f, int numa)
{
	for (int i = 0; i < f->ni.numa_nodes; i++)
		if (f->ni.numa[i].id == numa)
			return f->ni.numa[i].cpulist;
	return NULL;
}

static void
indent(struct writer *w, int depth)
{
	fprintf(w->out, "%*s", depth * 2, "");
}

static void
link_attrs(struct writer *w, const struct pci_dev *d)
{
	double gts = d->cur_speed_gts > 0 ? d->cur_speed_gts : d->max_speed_gts;
	int width = d->cur_width > 0 ? d->cur_width : d->max_width;

	/* NCCL maps these strings to a lane rate; "" falls back to its default */
	if (gts > 0)
		fprintf(w->out, " link_speed=\"%.1f GT/s PCIe\"", gts);
	else
		fprintf(w->out, " link_speed=\"\"");
	fprintf(w->out, " link_width=\"%d\"", width > 0 ? width : 0);
}

static void
pci_open(struct writer *w, const struct pci_dev *d, int depth)
{
	indent(w, depth);
	fprintf(w->out,
		"<pci busid=\"%s\" class=\"0x%06x\" vendor=\"0x%04x\" device=\"0x%04x\" subsystem_vendor=\"0x%04x\" "
		"subsystem_device=\"0x%04x\"",
		d->bdf, d->class_code, d->vendor, d->device, d->subsys_vendor, d->subsys_device);
	link_attrs(w, d);
}

/* How many of a GPU's NVLinks go to NVSwitch s of n: evenly, the
 * remainder to the outermost switches (an HGX H100's 18 over 4: 5 4 4 5). */
static int
links_to_switch(int links, int s, int n)
{
	int base = links / n, rem = links % n;

	return base + (s < (rem + 1) / 2 || s >= n - rem / 2);
}

static void
write_gpu(struct writer *w, int g, int depth)
{
	const struct topo *t = &w->f->topo;
	const struct pci_dev *d = &t->bus.dev[t->gpu[g]];
	const struct nvidia_gpu_model *m = nvidia_gpu_model(d->device);
	int links = m != NULL && t->n_nvswitches > 0 ? m->nvlinks : 0;

	pci_open(w, d, depth);
	fprintf(w->out, ">\n");
	indent(w, depth + 1);
	/* dev is NVML's index, which is bus order; sm and gdr are left to NCCL when we do not know them */
	fprintf(w->out, "<gpu dev=\"%d\"", g);
	if (m != NULL)
		fprintf(w->out, " sm=\"%d\"", m->sm);
	if (w->f->peermem)
		fprintf(w->out, " gdr=\"1\"");
	if (links == 0) {
		fprintf(w->out, "/>\n");
	} else {
		fprintf(w->out, ">\n");
		for (int s = 0; s < t->n_nvswitches; s++) {
			int count = links_to_switch(links, s, t->n_nvswitches);
			if (count == 0)
				continue;
			indent(w, depth + 2);
			fprintf(w->out, "<nvlink target=\"%s\" count=\"%d\" tclass=\"0x%06x\"/>\n",
				t->bus.dev[t->nvswitch[s]].bdf, count, t->bus.dev[t->nvswitch[s]].class_code);
		}
		indent(w, depth + 1);
		fprintf(w->out, "</gpu>\n");
	}
	indent(w, depth);
	fprintf(w->out, "</pci>\n");
}

static int
valid_rdma_name(const char *s)
{
	if (*s == '\0' || strlen(s) > 64)
		return 0;
	for (; *s; s++)
		if (!(*s == '_' || *s == '-' || (*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'z') ||
		      (*s >= 'A' && *s <= 'Z')))
			return 0;
	return 1;
}

static void
write_nic(struct writer *w, int n, int depth)
{
	const struct topo *t = &w->f->topo;
	const struct rdma_dev *r = &w->f->nic_rdma[n];

	pci_open(w, &t->bus.dev[t->nic[n]], depth);
	if (!valid_rdma_name(r->name)) {
		fprintf(w->out, "/>\n");
		return;
	}
	fprintf(w->out, ">\n");
	indent(w, depth + 1);
	fprintf(w->out, "<nic>\n");
	indent(w, depth + 2);
	fprintf(w->out, "<net name=\"%s\" dev=\"%d\"", r->name, w->net_dev++);
	if (r->n_ports > 0 && r->port[0].rate_mbps > 0)
		fprintf(w->out, " speed=\"%lld\"", r->port[0].rate_mbps);
	fprintf(w->out, " port=\"%d\"", r->n_ports > 0 ? r->port[0].num : 1);
	if (r->sys_image_guid != 0 || r->node_guid != 0)
		fprintf(w->out, " guid=\"0x%" PRIx64 "\"", r->sys_image_guid ? r->sys_image_guid : r->node_guid);
	if (w->f->peermem)
		fprintf(w->out, " gdr=\"1\"");
	fprintf(w->out, "/>\n");
	indent(w, depth + 1);
	fprintf(w->out, "</nic>\n");
	indent(w, depth);
	fprintf(w->out, "</pci>\n");
}

/* Every GPU and NIC under switch sw (bus.dev index), in bus order. */
static void
write_switch(struct writer *w, int sw, int depth)
{
	const struct topo *t = &w->f->topo;

	pci_open(w, &t->bus.dev[sw], depth);
	fprintf(w->out, ">\n");
	for (int i = 0; i < t->bus.n; i++) {
		for (int g = 0; g < t->n_gpus; g++)
			if (t->gpu[g] == i && t->gpu_switch[g] == sw)
				write_gpu(w, g, depth + 1);
		for (int n = 0; n < t->n_nics; n++)
			if (t->nic[n] == i && t->nic_switch[n] == sw)
				write_nic(w, n, depth + 1);
	}
	indent(w, depth);
	fprintf(w->out, "</pci>\n");
}

/* A VM's GPU with the NIC paired with it, under a switch of our making:
 * busid ffff:ff:NN.0 is no real bus, and NCCL takes it as a PCIe switch. */
static void
write_virtual_switch(struct writer *w, int g, int depth)
{
	const struct topo *t = &w->f->topo;

	indent(w, depth);
	fprintf(w->out, "<pci busid=\"ffff:ff:%02x.0\" class=\"0x060400\"", ++w->vswitch);
	link_attrs(w, &t->bus.dev[t->gpu[g]]);
	fprintf(w->out, ">\n");
	write_gpu(w, g, depth + 1);
	write_nic(w, t->gpu_nic[g], depth + 1);
	indent(w, depth);
	fprintf(w->out, "</pci>\n");
}

static int
switch_seen_before(const struct topo *t, int sw, int upto_gpu, int upto_nic)
{
	for (int g = 0; g < upto_gpu; g++)
		if (t->gpu_switch[g] == sw)
			return 1;
	for (int n = 0; n < upto_nic; n++)
		if (t->nic_switch[n] == sw)
			return 1;
	return 0;
}

static void
write_cpu_children(struct writer *w, int numa)
{
	const struct fabric *f = w->f;
	const struct topo *t = &f->topo;
	/* in a guest nothing sits under a switch: pairs get virtual ones */
	int virtual = t->virtual_pcie && f->cpu.guest;
	int nic_done[TOPO_MAX_NICS] = { 0 };

	for (int g = 0; g < t->n_gpus; g++) {
		int sw = t->gpu_switch[g];
		if (fabric_numa_of(f, t->gpu[g]) != numa)
			continue;
		if (sw >= 0) {
			if (!switch_seen_before(t, sw, g, 0))
				write_switch(w, sw, 2);
		} else if (virtual && t->gpu_nic[g] >= 0 && t->nic_switch[t->gpu_nic[g]] < 0) {
			write_virtual_switch(w, g, 2);
			nic_done[t->gpu_nic[g]] = 1;
		} else {
			write_gpu(w, g, 2);
		}
	}
	for (int n = 0; n < t->n_nics; n++) {
		int sw = t->nic_switch[n];
		if (fabric_numa_of(f, t->nic[n]) != numa || nic_done[n])
			continue;
		if (sw < 0)
			write_nic(w, n, 2);
		else if (!switch_seen_before(t, sw, t->n_gpus, n))
			write_switch(w, sw, 2);
	}
}

static int
write_cpu(struct writer *w, int numa, char *err, size_t errsize)
{
	const struct fabric *f = w->f;
	const char *cpulist = numa_cpulist(f, numa);
	char mask[MAX_CPUS / 4 + MAX_CPUS / 32 + 1];

	indent(w, 1);
	fprintf(w->out, "<cpu numaid=\"%d\"", numa);
	if (cpulist != NULL && cpulist[0] && cpulist_to_mask(cpulist, mask, sizeof(mask)) == 0)
		fprintf(w->out, " affinity=\"%s\"", mask);
	if (strcmp(f->cpu.vendor, "GenuineIntel") != 0 && strcmp(f->cpu.vendor, "AuthenticAMD") != 0) {
		snprintf(err, errsize,
			 "the CPU vendor cannot be read from /proc/cpuinfo ('%s'): NCCL needs it for an "
			 "x86 <cpu>",
			 f->cpu.vendor);
		return APP_EFORMAT;
	}
	fprintf(w->out, " arch=\"x86_64\" vendor=\"%s\"", f->cpu.vendor);
	if (f->cpu.family >= 0 && f->cpu.model >= 0)
		fprintf(w->out, " familyid=\"%d\" modelid=\"%d\"", f->cpu.family, f->cpu.model);
	else if (strcmp(f->cpu.vendor, "GenuineIntel") == 0) {
		snprintf(err, errsize,
			 "the CPU family and model cannot be read from /proc/cpuinfo: NCCL needs them for an "
			 "Intel <cpu>");
		return APP_EFORMAT;
	}
	fprintf(w->out, ">\n");
	write_cpu_children(w, numa);
	indent(w, 1);
	fprintf(w->out, "</cpu>\n");
	return 0;
}

static int
numa_used(const struct fabric *f, int numa)
{
	for (int g = 0; g < f->topo.n_gpus; g++)
		if (fabric_numa_of(f, f->topo.gpu[g]) == numa)
			return 1;
	for (int n = 0; n < f->topo.n_nics; n++)
		if (fabric_numa_of(f, f->topo.nic[n]) == numa)
			return 1;
	return 0;
}

char *
nccl_topo_render(const struct fabric *f, char *err, size_t errsize)
{
	struct writer w = { f, NULL, 0, 0 };
	char *text = NULL;
	size_t len = 0;
	int rc = 0;

	if (f->topo.n_gpus == 0) {
		snprintf(err, errsize, "no GPU on this node: NCCL has nothing to place");
		return NULL;
	}
	if (f->topo.gpus_seen > TOPO_MAX_GPUS) {
		snprintf(err, errsize,
			 "%d GPUs on the PCI bus, more than the %d one node can carry: the inventory is "
			 "wrong, not written",
			 f->topo.gpus_seen, TOPO_MAX_GPUS);
		return NULL;
	}
	if ((w.out = open_memstream(&text, &len)) == NULL) {
		snprintf(err, errsize, "out of memory");
		return NULL;
	}
	fprintf(w.out, "<system version=\"1\">\n");
	/* NUMA ids are small; a device's own (or node 0) decides its <cpu> */
	for (int numa = 0; numa < 1024 && rc == 0; numa++)
		if (numa_used(f, numa))
			rc = write_cpu(&w, numa, err, errsize);
	fprintf(w.out, "</system>\n");
	if (fclose(w.out) != 0 && rc == 0) {
		snprintf(err, errsize, "out of memory");
		rc = APP_ENOMEM;
	}
	if (rc < 0) {
		free(text);
		return NULL;
	}
	return text;
}
