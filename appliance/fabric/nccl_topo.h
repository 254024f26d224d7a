/*
 * NCCL's topology file for this node (NCCL_TOPO_FILE): CPUs with their
 * NUMA affinity, PCIe switches each with its GPUs and NICs, the GPUs'
 * NVLinks to the NVSwitches, and each NIC's RDMA device with speed,
 * port, GUID and GPUDirect support.  In a VM the PCIe topology is flat,
 * so each GPU and the NIC paired with it (passed through in the order
 * GPU0, NIC0, GPU1, NIC1, ...) are put under a virtual switch: that is
 * what tells NCCL which NIC is next to which GPU on the host.
 */
#ifndef PRIVAI_NCCL_TOPO_H
#define PRIVAI_NCCL_TOPO_H

#include <stddef.h>

#include "fabric.h"

/* The file's text (malloc'd), or NULL with err. */
char *nccl_topo_render(const struct fabric *f, char *err, size_t errsize);

/* Check a topology file's text against NCCL's reader and against f: every
 * GPU and RDMA NIC present, each GPU under one switch with its NIC, NUMA
 * nodes right, nothing named that the node lacks.  Returns the number of
 * problems, each appended to *problems (a cJSON array of strings). */
struct cJSON;
int nccl_topo_check(const struct fabric *f, const char *text, size_t len, struct cJSON *problems);

#endif
