/*
 * Workload VMs on a bare-metal install: the server carved into VMs, each
 * with whole GPU + RDMA NIC pairs passed through (the pairs discovery
 * computes: same PCIe switch, 1:1), memory from 1 GiB huge pages of the
 * GPUs' NUMA node, vCPUs pinned to that node's CPUs, a 64-bit MMIO
 * window sized from the devices' BARs, and a disk image.  privai-admin
 * manages them through libvirt's C API (vm_libvirt.c), never virsh.
 *
 *   vm_devices.c  the GPUs asked for, their NIC partners, and the checks
 *                 a passthrough needs: bound to vfio-pci, an IOMMU group
 *                 of their own, not held by another VM
 *   vm_xml.c      the libvirt domain XML
 *   vm_libvirt.c  define, start, stop, undefine, state
 *   vm_seed.c     a NoCloud seed ISO that makes the guest join as a member
 */
#ifndef PRIVAI_ADMIN_VM_H
#define PRIVAI_ADMIN_VM_H

#include <stddef.h>
#include <stdint.h>

#define VM_MAX_DEVICES 32
#define VM_ERR_LEN 512

struct vm_device {
	char bdf[16];   /* "0000:18:00.0" */
	char role[8];   /* "gpu" or "nic" */
	char name[40];  /* "H100 SXM5 80GB", "mlx5_0" */
	uint64_t bar64; /* its 64-bit BARs, bytes (estimated where sysfs has none) */
	int numa_node;  /* -1 unknown */
};

struct vm_spec {
	char name[64];
	int vcpus;
	int memory_gib;
	int hugepages; /* back memory with 1 GiB huge pages */
	char image[1024];
	char seed[1024];        /* a NoCloud seed image (cidata), "" none */
	char network[64];       /* a libvirt network for its NIC, "" none */
	char console_log[1024]; /* the serial console, written to this file; "" a pty */
	int n_devices;
	struct vm_device dev[VM_MAX_DEVICES];
	int numa_node;       /* the GPUs' NUMA node, -1 when they span nodes or none is known */
	char cpuset[256];    /* host CPUs its vCPUs are pinned to, one each in order; "" unpinned */
	int mmio_window_gib; /* the 64-bit PCI hole */
};

/* Why a device cannot be passed through: for the reply, which field and
 * status. */
struct vm_refusal {
	int status; /* 409 held elsewhere, 422 otherwise */
	char code[32];
	char message[VM_ERR_LEN];
};

/*
 * Fill s->dev, numa_node, cpuset and mmio_window_gib for the GPUs named
 * (BDFs), each with the NIC discovery pairs it with, from the host under
 * sys_root.  held: the BDFs other VMs hold (n_held of them, with the VM
 * holding each in held_by).  0, or -1 with *why.
 */
int vm_devices_pick(const char *sys_root, const char *const *gpus, int n_gpus, const char (*held)[16],
		    const char (*held_by)[64], int n_held, struct vm_spec *s, struct vm_refusal *why);

/* The domain XML (malloc'd) for the libvirt driver `type` ("kvm"; "qemu"
 * where there is no KVM: emulated, no host CPU model; "test" for
 * libvirt's test driver); NULL when out of memory. */
char *vm_domain_xml(const struct vm_spec *s, const char *type);

/* DIR/NAME-seed.iso (into path), a cidata volume of user_data and a
 * meta-data naming the instance; 0, or -1 with err (nothing left then). */
int vm_seed_write(const char *dir, const char *name, const char *user_data, char *path, size_t size, char *err);

/* libvirt: each call opens its own connection to uri.  0, or -1 with err
 * (libvirt's own message, with what was being done). */
int vm_define(const char *uri, const struct vm_spec *s, char *uuid, size_t uuid_size, char *err);
int vm_start(const char *uri, const char *name, char *err);
int vm_stop(const char *uri, const char *name, int force, char *err);
int vm_undefine(const char *uri, const char *name, char *err);
/* "running", "stopped", "paused", "crashed", "missing" (not defined in
 * libvirt), or "unknown" with err when libvirt cannot be asked. */
const char *vm_state(const char *uri, const char *name, char *err);
/* The domain's XML as libvirt holds it (malloc'd), or NULL with err. */
char *vm_xml_of(const char *uri, const char *name, char *err);

#endif
