/*
 * The NCCL environment of this node's engine ranks (/etc/privai/nccl.env,
 * read by privai-engine's GPU ranks, engine/src/cli/tp_nccl_env.c): the
 * settings the field otherwise works out by hand from the hardware,
 * each with the reason for its value, and the ones left to NCCL with the
 * reason they are.
 *
 *   NCCL_IB_HCA         the RDMA NICs paired with the GPUs, on their
 *                       active ports, exact names
 *   NCCL_IB_GID_INDEX   RoCE only: the GID of RoCE v2 with an IPv4 address
 *   NCCL_NET_GDR_LEVEL  GPUDirect RDMA where GPU and NIC share a switch
 *   NCCL_P2P_LEVEL      NVLink only on NVSwitch boards; none in a VM
 *                       without NVLink
 *   NCCL_SOCKET_IFNAME  the interface of the default route (bootstrap)
 *   NCCL_TOPO_FILE      in a VM, the topology file privai-fabric writes
 */
#ifndef PRIVAI_NCCL_ENV_H
#define PRIVAI_NCCL_ENV_H

#include <stddef.h>

#include "fabric.h"

#define NCCL_ENV_MAX 8
#define NCCL_ENV_HEADER "# privai-fabric nccl-env: written from this node's discovery"

struct nccl_setting {
	char name[32];
	char value[256]; /* "" when left to NCCL */
	char why[512];
};

struct nccl_env {
	int n;
	struct nccl_setting s[NCCL_ENV_MAX];
};

/* Work the settings out from f; topo_file is where the topology file
 * is (set only where NCCL needs it).  Never fails: what cannot be
 * decided is left to NCCL, with the reason. */
void nccl_env_build(const struct fabric *f, const char *topo_file, struct nccl_env *e);

/* The file's text: the header, then per setting its reason as comments
 * and NAME=VALUE (or a commented "NAME not set").  malloc'd, NULL when
 * out of memory. */
char *nccl_env_render(const struct nccl_env *e);

/* The settings as a JSON array of {name, value (null when left to
 * NCCL), why}. */
struct cJSON *nccl_env_json(const struct nccl_env *e);

#endif
