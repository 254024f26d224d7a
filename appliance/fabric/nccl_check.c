/*
 * Checking a topology file: first as NCCL's reader would take it (the
 * dialect, the elements and attributes it requires), then against the
 * node: every GPU and RDMA NIC present, in the right NUMA node's <cpu>,
 * each GPU sharing a switch with its NIC, nothing named that the node
 * lacks.  A stale file (hardware moved, a NIC replaced) is as harmful as
 * none, since NCCL believes it.
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl_topo.h"
#include "nccl_xml.h"

/* "0000:1b:00.0" (or NCCL's virtual "ffff:ff:01.0"): hex domain, bus, device, function. */
static int
valid_busid(const char *s)
{
	unsigned dom, bus, dev, fn;
	int n = 0;

	return sscanf(s, "%x:%x:%x.%x%n", &dom, &bus, &dev, &fn, &n) == 4 && s[n] == '\0' &&
	       isxdigit((unsigned char)s[0]);
}

static int
is_number(const char *s, int hex_ok)
{
	char *end;

	if (s == NULL || *s == '\0')
		return 0;
	strtoll(s, &end, hex_ok ? 0 : 10);
	return *end == '\0';
}

/* What NCCL's loader requires of each element, in the order it reads them. */
static int
check_required(struct nccl_node *n, cJSON *problems)
{
	static const struct {
		const char *element, *attrs[4];
	} need[] = {
		{ "cpu", { "numaid", "arch" } },
		{ "pci", { "busid", "class", "link_width", "link_speed" } },
		{ "nvlink", { "count", "tclass" } },
		{ "net", { "name" } },
	};
	int bad = 0;

	for (size_t i = 0; i < sizeof(need) / sizeof(need[0]); i++) {
		if (strcmp(n->name, need[i].element) != 0)
			continue;
		for (int a = 0; a < 4 && need[i].attrs[a]; a++)
			if (nccl_xml_attr(n, need[i].attrs[a]) == NULL)
				bad += fabric_json_addf(problems, "line %d: <%s> has no %s, which NCCL requires",
							n->line, n->name, need[i].attrs[a]);
	}
	if (strcmp(n->name, "cpu") == 0 && !is_number(nccl_xml_attr(n, "numaid"), 0) && nccl_xml_attr(n, "numaid"))
		bad += fabric_json_addf(problems, "line %d: <cpu numaid> is not a number", n->line);
	if (strcmp(n->name, "cpu") == 0 && nccl_xml_attr(n, "arch") &&
	    strcmp(nccl_xml_attr(n, "arch"), "x86_64") == 0 && nccl_xml_attr(n, "vendor") == NULL)
		bad += fabric_json_addf(problems, "line %d: an x86_64 <cpu> has no vendor, which NCCL requires",
					n->line);
	if (strcmp(n->name, "pci") == 0 && nccl_xml_attr(n, "busid") && !valid_busid(nccl_xml_attr(n, "busid")))
		bad += fabric_json_addf(problems, "line %d: busid '%s' is not a PCI address", n->line,
					nccl_xml_attr(n, "busid"));
	if (strcmp(n->name, "pci") == 0 && nccl_xml_attr(n, "link_width") &&
	    !is_number(nccl_xml_attr(n, "link_width"), 0))
		bad += fabric_json_addf(problems, "line %d: link_width '%s' is not a number", n->line,
					nccl_xml_attr(n, "link_width"));
	if (strcmp(n->name, "nvlink") == 0 && nccl_xml_attr(n, "tclass") &&
	    strcmp(nccl_xml_attr(n, "tclass"), "0x068000") != 0 && nccl_xml_attr(n, "target") == NULL)
		bad += fabric_json_addf(problems, "line %d: an NVLink to a GPU has no target", n->line);
	return bad;
}

/* Where each element may sit, as NCCL's loader walks the file: anything
 * else it skips silently, which loses what the operator meant. */
static int
check_place(struct nccl_node *n, cJSON *problems)
{
	static const struct {
		const char *element, *parents;
	} place[] = {
		{ "system", "" }, { "cpu", "system" }, { "pci", "cpu pci" }, { "gpu", "pci" },     { "nic", "cpu pci" },
		{ "net", "nic" }, { "nvlink", "gpu" }, { "c2c", "gpu" },     { "pcilink", "pci" },
	};
	const char *parent = n->parent ? n->parent->name : "";

	for (size_t i = 0; i < sizeof(place) / sizeof(place[0]); i++) {
		if (strcmp(n->name, place[i].element) != 0)
			continue;
		const char *p = place[i].parents;
		if (*p == '\0' && parent[0] == '\0')
			return 0;
		while (*p) {
			size_t k = strcspn(p, " ");
			if (strlen(parent) == k && strncmp(p, parent, k) == 0)
				return 0;
			p += k + (p[k] == ' ');
		}
		return fabric_json_addf(problems, "line %d: <%s> inside <%s>: NCCL ignores it there", n->line, n->name,
					parent[0] ? parent : "nothing");
	}
	return fabric_json_addf(problems, "line %d: <%s> is no element of NCCL's topology", n->line, n->name);
}

static struct nccl_node *
find_pci(struct nccl_node *root, const char *bdf)
{
	for (struct nccl_node *n = root; n != NULL; n = nccl_xml_walk(n))
		if (strcmp(n->name, "pci") == 0 && nccl_xml_attr(n, "busid") &&
		    strcasecmp(nccl_xml_attr(n, "busid"), bdf) == 0)
			return n;
	return NULL;
}

static struct nccl_node *
find_net(struct nccl_node *root, const char *name)
{
	for (struct nccl_node *n = root; n != NULL; n = nccl_xml_walk(n))
		if (strcmp(n->name, "net") == 0 && nccl_xml_attr(n, "name") &&
		    strcmp(nccl_xml_attr(n, "name"), name) == 0)
			return n;
	return NULL;
}

static int
check_numa(const struct fabric *f, int dev, struct nccl_node *pci, const char *what, cJSON *problems)
{
	struct nccl_node *cpu = nccl_xml_ancestor(pci, "cpu");
	const char *id = cpu ? nccl_xml_attr(cpu, "numaid") : NULL;
	int numa = f->topo.bus.dev[dev].numa_node;

	if (numa < 0 || id == NULL || atoi(id) == numa)
		return 0;
	return fabric_json_addf(problems, "%s %s is under <cpu numaid=\"%s\"> but sits on NUMA node %d", what,
				f->topo.bus.dev[dev].bdf, id, numa);
}

static int
check_hardware(const struct fabric *f, struct nccl_node *root, cJSON *problems)
{
	const struct topo *t = &f->topo;
	int bad = 0;

	for (int g = 0; g < t->n_gpus; g++) {
		const char *bdf = t->bus.dev[t->gpu[g]].bdf;
		struct nccl_node *pci = find_pci(root, bdf), *nic_pci;
		int n = t->gpu_nic[g];
		if (pci == NULL) {
			bad += fabric_json_addf(problems, "GPU%d %s is not in the file", g, bdf);
			continue;
		}
		bad += check_numa(f, t->gpu[g], pci, "GPU", problems);
		/* a switch shared in the file is only owed where one is shared on
		 * the host (or, in a guest, where the file stands in for it) */
		if (n < 0 || f->nic_rdma[n].name[0] == '\0' ||
		    (t->gpu_pairing[g] != TOPO_PAIR_SWITCH && !(t->virtual_pcie && f->cpu.guest)))
			continue;
		nic_pci = find_pci(root, t->bus.dev[t->nic[n]].bdf);
		if (nic_pci == NULL)
			continue; /* reported with the NICs */
		if (pci->parent != nic_pci->parent || strcmp(pci->parent->name, "pci") != 0)
			bad += fabric_json_addf(problems,
						"GPU%d %s and its NIC %s %s are not under one PCIe switch in the file: "
						"NCCL will not use that NIC for GPU%d's traffic",
						g, bdf, f->nic_rdma[n].name, t->bus.dev[t->nic[n]].bdf, g);
	}
	for (int n = 0; n < t->n_nics; n++) {
		const char *bdf = t->bus.dev[t->nic[n]].bdf, *name = f->nic_rdma[n].name;
		struct nccl_node *pci = find_pci(root, bdf), *net;
		if (name[0] == '\0')
			continue;
		if (pci == NULL) {
			bad += fabric_json_addf(problems, "NIC %s %s is not in the file", name, bdf);
			continue;
		}
		bad += check_numa(f, t->nic[n], pci, "NIC", problems);
		net = find_net(root, name);
		if (net != NULL && nccl_xml_ancestor(net, "pci") != pci)
			bad += fabric_json_addf(problems, "net %s is under another device than its NIC %s", name, bdf);
	}
	for (struct nccl_node *n = root; n != NULL; n = nccl_xml_walk(n)) {
		const char *busid = strcmp(n->name, "pci") == 0 ? nccl_xml_attr(n, "busid") : NULL;
		const char *cls = nccl_xml_attr(n, "class");
		if (busid == NULL || !valid_busid(busid) || strncasecmp(busid, "ffff:", 5) == 0)
			continue;
		if (pci_find(&t->bus, busid) < 0 && cls != NULL &&
		    (strncmp(cls, "0x03", 4) == 0 || strncmp(cls, "0x02", 4) == 0))
			bad += fabric_json_addf(problems,
						"line %d: the file names %s %s, which this node does not have", n->line,
						strncmp(cls, "0x03", 4) == 0 ? "GPU" : "NIC", busid);
	}
	for (struct nccl_node *n = root; n != NULL; n = nccl_xml_walk(n)) {
		const char *name = strcmp(n->name, "net") == 0 ? nccl_xml_attr(n, "name") : NULL;
		int known = 0;
		for (int k = 0; name != NULL && k < t->n_nics && !known; k++)
			known = strcmp(f->nic_rdma[k].name, name) == 0;
		if (name != NULL && !known)
			bad += fabric_json_addf(problems,
						"line %d: the file names RDMA device %s, which this node does not have",
						n->line, name);
	}
	return bad;
}

int
nccl_topo_check(const struct fabric *f, const char *text, size_t len, cJSON *problems)
{
	char err[256];
	struct nccl_node *root = nccl_xml_parse(text, len, err, sizeof(err)), *n;
	const char *version;
	int bad = 0;

	if (root == NULL)
		return fabric_json_addf(problems, "NCCL cannot read it: %s", err);
	if (strcmp(root->name, "system") != 0) {
		bad = fabric_json_addf(problems, "line %d: the top element is <%s>, not <system>", root->line,
				       root->name);
		nccl_xml_free(root);
		return bad;
	}
	version = nccl_xml_attr(root, "version");
	if (version == NULL || strcmp(version, "1") != 0)
		bad += fabric_json_addf(problems, "line %d: <system version> is %s%s%s, NCCL reads version 1 only",
					root->line, version ? "'" : "", version ? version : "missing",
					version ? "'" : "");
	for (n = root; n != NULL; n = nccl_xml_walk(n)) {
		bad += check_place(n, problems);
		bad += check_required(n, problems);
	}
	if (bad == 0)
		bad += check_hardware(f, root, problems);
	nccl_xml_free(root);
	return bad;
}
