/* GPUs, RDMA NICs and NVSwitches, and which NIC serves which GPU. */
#include <string.h>

#include "status.h"
#include "topo.h"

int
topo_switch_of(const struct pci_bus *bus, int i)
{
	int p = bus->dev[i].parent;

	/* climb to the bridge whose own parent is the root port */
	while (p >= 0 && bus->dev[p].parent >= 0 && bus->dev[bus->dev[p].parent].parent >= 0)
		p = bus->dev[p].parent;
	if (p < 0 || bus->dev[p].parent < 0 || !pci_is_bridge(&bus->dev[p]))
		return PCI_NONE;
	return p;
}

static int
is_rdma_nic(const struct pci_dev *d)
{
	return pci_is_nic(d) && (d->n_rdma > 0 || d->vendor == PCI_VENDOR_MELLANOX);
}

/* Within each switch, the k-th GPU in bus order takes the k-th NIC. */
static void
pair(struct topo *t)
{
	for (int g = 0; g < t->n_gpus; g++)
		t->gpu_nic[g] = -1;
	for (int k = 0; k < t->n_nics; k++)
		t->nic_gpu[k] = -1;
	for (int g = 0; g < t->n_gpus; g++) {
		t->gpu_pairing[g] = TOPO_PAIR_NONE;
		if (t->gpu_switch[g] < 0)
			continue;
		for (int k = 0; k < t->n_nics; k++)
			if (t->nic_switch[k] == t->gpu_switch[g] && t->nic_gpu[k] < 0) {
				t->gpu_nic[g] = k;
				t->nic_gpu[k] = g;
				t->gpu_pairing[g] = TOPO_PAIR_SWITCH;
				break;
			}
	}
	for (int g = 0; g < t->n_gpus; g++) {
		int numa = t->bus.dev[t->gpu[g]].numa_node;
		if (t->gpu_switch[g] >= 0)
			continue;
		for (int k = 0; k < t->n_nics; k++)
			if (t->nic_switch[k] < 0 && t->nic_gpu[k] < 0 && t->bus.dev[t->nic[k]].numa_node == numa) {
				t->gpu_nic[g] = k;
				t->nic_gpu[k] = g;
				t->gpu_pairing[g] = TOPO_PAIR_NUMA;
				break;
			}
	}
}

int
topo_read(const char *root, struct topo *t, char *err, size_t errsize)
{
	int under_switch = 0;

	memset(t, 0, sizeof(*t));
	if (pci_scan(root, &t->bus, err, errsize) < 0)
		return APP_EIO;
	for (int i = 0; i < t->bus.n; i++) {
		const struct pci_dev *d = &t->bus.dev[i];
		if (pci_is_gpu(d)) {
			if (t->gpus_seen++ < TOPO_MAX_GPUS) {
				t->gpu_switch[t->n_gpus] = topo_switch_of(&t->bus, i);
				under_switch += t->gpu_switch[t->n_gpus] >= 0;
				t->gpu[t->n_gpus++] = i;
			}
		} else if (pci_is_nvswitch(d) && t->n_nvswitches < TOPO_MAX_NVSWITCHES) {
			t->nvswitch[t->n_nvswitches++] = i;
		} else if (is_rdma_nic(d) && t->n_nics < TOPO_MAX_NICS) {
			t->nic_switch[t->n_nics] = topo_switch_of(&t->bus, i);
			t->nic[t->n_nics++] = i;
		}
	}
	t->virtual_pcie = t->n_gpus > 0 && under_switch == 0;
	pair(t);
	return 0;
}

void
topo_free(struct topo *t)
{
	pci_free(&t->bus);
}

const char *
topo_nic_name(const struct topo *t, int nic)
{
	const struct pci_dev *d = &t->bus.dev[t->nic[nic]];

	return d->n_rdma > 0 ? d->rdma[0] : d->n_netdev > 0 ? d->netdev[0] : d->bdf;
}

int
topo_port_feeds_device(const struct topo *t, int k)
{
	const struct pci_dev *b = &t->bus.dev[k];
	int feeds = 0;

	if (!pci_is_bridge(b) || b->parent < 0)
		return 0;
	for (int g = 0; g < t->n_gpus && !feeds; g++)
		feeds = t->bus.dev[t->gpu[g]].parent == k;
	for (int n = 0; n < t->n_nics && !feeds; n++)
		feeds = t->bus.dev[t->nic[n]].parent == k;
	return feeds;
}
