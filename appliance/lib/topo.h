/*
 * The GPU server's PCIe topology as GPUDirect sees it: GPUs, RDMA NICs,
 * NVSwitches, and the PCIe switch above each (the bridge just below the
 * root port).  A GPU is paired 1:1 with an RDMA NIC under the same switch,
 * in bus order, which is how HGX boards are wired (4 switches x 2 GPUs +
 * 2 NICs) and what makes GPUDirect RDMA avoid the CPU's root complex.
 */
#ifndef PRIVAI_TOPO_H
#define PRIVAI_TOPO_H

#include "pci.h"

#define TOPO_MAX_GPUS 16 /* the most any NVSwitch system carries (DGX-2, HGX-2) */
#define TOPO_MAX_NICS 32
#define TOPO_MAX_NVSWITCHES 12

enum {
	TOPO_PAIR_NONE,
	TOPO_PAIR_SWITCH, /* under one PCIe switch: P2P never leaves it */
	TOPO_PAIR_NUMA,   /* only the same CPU socket: P2P crosses the root complex */
};

struct topo {
	struct pci_bus bus;
	int gpus_seen;                  /* may exceed TOPO_MAX_GPUS; only the first are kept */
	int n_gpus, gpu[TOPO_MAX_GPUS]; /* indexes into bus.dev, in bus order */
	int n_nics, nic[TOPO_MAX_NICS]; /* RDMA-capable NICs */
	int n_nvswitches, nvswitch[TOPO_MAX_NVSWITCHES];
	int gpu_switch[TOPO_MAX_GPUS]; /* bus.dev index of the switch above, PCI_NONE for none */
	int nic_switch[TOPO_MAX_NICS];
	int gpu_nic[TOPO_MAX_GPUS];     /* index into nic[], -1 unpaired */
	int gpu_pairing[TOPO_MAX_GPUS]; /* TOPO_PAIR_* */
	int nic_gpu[TOPO_MAX_NICS];     /* index into gpu[], -1 unpaired */
	int virtual_pcie;               /* no GPU sits under a switch: a VM's flat topology */
};

/* Scan and pair: under a common switch first; a GPU with no switch above
 * it (a VM's virtual root ports, a PCIe server's direct slots) takes a
 * switchless NIC of its NUMA node.   0, or an APP_E* code with err (out of memory). */
int topo_read(const char *root, struct topo *t, char *err, size_t errsize);
void topo_free(struct topo *t);

/* The bus.dev index of the PCIe switch (upstream port below a root port)
 * above device i, or PCI_NONE. */
int topo_switch_of(const struct pci_bus *bus, int i);

/* A NIC's RDMA name if it has one, else its network interface, else its BDF. */
const char *topo_nic_name(const struct topo *t, int nic);

/* Whether bus.dev[k] is a bridge below a root port with a GPU or an RDMA
 * NIC right under it: a switch port whose ACS decides where their
 * peer-to-peer traffic goes. */
int topo_port_feeds_device(const struct topo *t, int k);

#endif
