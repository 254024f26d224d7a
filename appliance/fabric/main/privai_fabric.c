/*
 * privai-fabric: the fabric-manager companion.  It discovers the node's
 * GPUs, NVSwitches, RDMA NICs and PCIe switches, writes NCCL's topology
 * file and checks an existing one, renders the vSphere VM class a GPU VM
 * needs, keeps NVIDIA Fabric Manager configured and running through
 * systemd, and reports the fabric's state to privai-admin.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fabric.h"
#include "fabric_cmd.h"
#include "hostfs.h"
#include "nccl_topo.h"
#include "vmclass.h"

static void
usage(FILE *fp)
{
	fputs("usage: privai-fabric COMMAND [options]\n"
	      "\n"
	      "  discover [--json]            GPUs, NVSwitches, RDMA NICs and ports, PCIe switches, GPU-NIC pairing\n"
	      "  topology [--write FILE]      NCCL's topology file (NCCL_TOPO_FILE) for this node\n"
	      "  topology --check FILE        check a topology file against NCCL's reader and this node\n"
	      "  nccl-env [--json] [--write FILE]\n"
	      "                               the NCCL settings of this node's engine ranks, each with its reason\n"
	      "  validate [--rdma] [--nccl] [--json] [--deadline S] [--no-save]\n"
	      "           [--nccl-init HOST:PORT --nnodes N --node-rank R]\n"
	      "                               measure RDMA (ib_write_bw, with and without GPUDirect) and NCCL\n"
	      "                               all-reduce (privai-nccl-perf) against pass marks from the hardware\n"
	      "  vmclass [--json] [--shared-nvswitch]\n"
	      "                               the vSphere VM class a GPU VM on this host needs\n"
	      "  fm-config [--dry-run]        write Fabric Manager's configuration from the settings\n"
	      "  fm start|stop|restart|status [--json]\n"
	      "                               Fabric Manager's unit through systemd; start waits until it is ready\n"
	      "  serve                        keep Fabric Manager up and answer GET /status on the status socket\n"
	      "\n"
	      "options:\n"
	      "  --root DIR      read and write the host under DIR (PRIVAI_FABRIC_ROOT; default /)\n"
	      "  --config FILE   PRIVAI_FABRIC_*=VALUE lines (PRIVAI_FABRIC_CONFIG; default /etc/privai/fabric.conf\n"
	      "                  when it exists); the environment wins over the file\n"
	      "\n"
	      "settings (environment or config file):\n"
	      "  PRIVAI_FABRIC_MODE            bare-metal | shared-nvswitch | vgpu (Fabric Manager's FABRIC_MODE "
	      "0/1/2)\n"
	      "  PRIVAI_FABRIC_LOG_LEVEL       none | critical | error | warning | info (default info)\n"
	      "  PRIVAI_FABRIC_LOG_FILE        Fabric Manager's log (default /var/log/fabricmanager.log)\n"
	      "  PRIVAI_FABRIC_LOG_SYSLOG      yes | no (default no)\n"
	      "  PRIVAI_FABRIC_BIND_ADDRESS    IPv4 address Fabric Manager listens on (default 127.0.0.1)\n"
	      "  PRIVAI_FABRIC_ACCESS_LINK_FAILURE_MODE, _TRUNK_LINK_FAILURE_MODE, _NVSWITCH_FAILURE_MODE  0 | 1\n"
	      "  PRIVAI_FABRIC_STAY_RESIDENT_ON_FAILURES  yes | no (default no)\n"
	      "  PRIVAI_FABRIC_ABORT_CUDA_JOBS_ON_EXIT    yes | no (default yes)\n"
	      "  PRIVAI_FABRIC_FM_CONFIG       Fabric Manager's config (default "
	      "/usr/share/nvidia/nvswitch/fabricmanager.cfg)\n"
	      "  PRIVAI_FABRIC_FM_UNIT         its unit (default nvidia-fabricmanager.service)\n"
	      "  PRIVAI_FABRIC_BUS             system | user: which systemd manager runs it (default system)\n"
	      "  PRIVAI_FABRIC_READY_TIMEOUT   seconds start waits for it (default 240)\n"
	      "  PRIVAI_FABRIC_STATUS_SOCKET   the status socket (default /run/privai/fabric.sock)\n"
	      "  PRIVAI_FABRIC_INTERVAL        seconds between serve's checks (default 10)\n"
	      "  PRIVAI_FABRIC_NCCL_TOPO_FILE  NCCL's topology file (default /etc/privai/nccl-topo.xml)\n"
	      "  PRIVAI_FABRIC_NCCL_ENV        the engine ranks' NCCL settings, kept current by serve "
	      "(default /etc/privai/nccl.env)\n"
	      "  PRIVAI_FABRIC_VALIDATION      where validate keeps its last report (default "
	      "/var/lib/privai-fabric/validation.json)\n"
	      "\n"
	      "exit status: 0 ok, 1 a check failed or Fabric Manager is not ready, 2 usage or read error\n",
	      fp);
}

static int
cmd_discover(struct fabric_opts *o, int argc, char **argv)
{
	struct fabric f;
	char err[256];
	int json = 0;

	for (int i = 0; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0)
			json = 1;
		else
			return fabric_usage_error("discover", argv[i]);
	}
	if (fabric_read(o->root, fabric_live(o), &f, err, sizeof(err)) < 0)
		return fabric_fail("discover", err);
	cJSON *j = fabric_json(&f);
	if (json) {
		fabric_print_json(j);
	} else {
		const struct topo *t = &f.topo;
		printf("driver %s, Fabric Manager %s, %d GPU%s, %d NVSwitch%s, %d RDMA NIC%s (RDMA from %s)\n",
		       f.driver_version[0] ? f.driver_version : "not loaded",
		       f.fm_version[0] ? f.fm_version : "not installed", t->n_gpus, t->n_gpus == 1 ? "" : "s",
		       t->n_nvswitches, t->n_nvswitches == 1 ? "" : "es", t->n_nics, t->n_nics == 1 ? "" : "s",
		       f.rdma_source);
		for (int g = 0; g < t->n_gpus; g++) {
			int n = t->gpu_nic[g], sw = t->gpu_switch[g];
			printf("  GPU%-2d %s  switch %-12s  NUMA %-2d  NIC %s%s\n", g, t->bus.dev[t->gpu[g]].bdf,
			       sw >= 0 ? t->bus.dev[sw].bdf : "none", t->bus.dev[t->gpu[g]].numa_node,
			       n >= 0 ? topo_nic_name(t, n) : "none",
			       n < 0                                   ? ""
			       : t->gpu_pairing[g] == TOPO_PAIR_SWITCH ? " (same switch)"
								       : " (same NUMA node only)");
		}
		for (int n = 0; n < t->n_nics; n++) {
			const struct rdma_dev *r = &f.nic_rdma[n];
			printf("  NIC   %s  %s", t->bus.dev[t->nic[n]].bdf, topo_nic_name(t, n));
			if (r->n_ports > 0)
				printf("  port %d %s %s %s", r->port[0].num,
				       r->port[0].state_name[0] ? r->port[0].state_name : "?",
				       r->port[0].rate[0] ? r->port[0].rate : "rate unknown", r->port[0].link_layer);
			printf("\n");
		}
		for (int s = 0; s < t->n_nvswitches; s++)
			printf("  NVSwitch %s\n", t->bus.dev[t->nvswitch[s]].bdf);
		if (f.rdma_problem[0])
			printf("  note: %s\n", f.rdma_problem);
	}
	cJSON_Delete(j);
	fabric_free(&f);
	return 0;
}

static int
check_file(struct fabric *f, const char *path)
{
	size_t len;
	char *text = NULL, full[4096];
	cJSON *problems = cJSON_CreateArray(), *p;
	int bad;

	errno = 0;
	if (fabric_abs_path(path, full, sizeof(full)) < 0 ||
	    (text = hostfs_read_text("/", full, 4 << 20, &len)) == NULL) {
		fprintf(stderr, "privai-fabric: topology --check %s: %s\n", path, strerror(errno ? errno : EIO));
		cJSON_Delete(problems);
		return 2;
	}
	bad = nccl_topo_check(f, text, len, problems);
	if (bad == 0)
		printf("%s: NCCL can read it, and it matches this node (%d GPUs, %d NICs)\n", path, f->topo.n_gpus,
		       f->topo.n_nics);
	cJSON_ArrayForEach (p, problems)
		printf("%s: %s\n", path, p->valuestring);
	free(text);
	cJSON_Delete(problems);
	return bad ? 1 : 0;
}

static int
cmd_topology(struct fabric_opts *o, int argc, char **argv)
{
	const char *write = NULL, *check = NULL;
	struct fabric f;
	char err[256], *text;
	int rc = 0;

	for (int i = 0; i < argc; i++) {
		if (strcmp(argv[i], "--write") == 0 && i + 1 < argc)
			write = argv[++i];
		else if (strcmp(argv[i], "--check") == 0 && i + 1 < argc)
			check = argv[++i];
		else
			return fabric_usage_error("topology", argv[i]);
	}
	if (fabric_read(o->root, fabric_live(o), &f, err, sizeof(err)) < 0)
		return fabric_fail("topology", err);
	if (check != NULL) {
		rc = check_file(&f, check);
	} else if ((text = nccl_topo_render(&f, err, sizeof(err))) == NULL) {
		rc = fabric_fail("topology", err);
	} else {
		char full[4096];
		if (write == NULL)
			fputs(text, stdout);
		else if (fabric_abs_path(write, full, sizeof(full)) < 0 ||
			 hostfs_write("/", full, text, strlen(text), 1) < 0)
			rc = fabric_fail("topology --write", strerror(errno ? errno : EIO));
		else
			fprintf(stderr, "privai-fabric: wrote %s (%d GPUs, %d NICs); point NCCL_TOPO_FILE at it\n",
				write, f.topo.n_gpus, f.topo.n_nics);
		free(text);
	}
	fabric_free(&f);
	return rc;
}

static int
cmd_vmclass(struct fabric_opts *o, int argc, char **argv)
{
	struct fabric f;
	char err[256];
	int json = 0, shared = 0;

	for (int i = 0; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0)
			json = 1;
		else if (strcmp(argv[i], "--shared-nvswitch") == 0)
			shared = 1;
		else
			return fabric_usage_error("vmclass", argv[i]);
	}
	if (fabric_read(o->root, 0, &f, err, sizeof(err)) < 0)
		return fabric_fail("vmclass", err);
	if (f.topo.n_gpus == 0) {
		fabric_free(&f);
		return fabric_fail("vmclass", "no GPU on this host: a GPU VM class has nothing to pass through");
	}
	cJSON *j = vmclass_json(&f, shared);
	if (json)
		fabric_print_json(j);
	else
		vmclass_print(j, stdout);
	cJSON_Delete(j);
	fabric_free(&f);
	return 0;
}

int
main(int argc, char **argv)
{
	struct fabric_opts o;
	char err[256];
	int first = 1;

	if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (fabric_opts_parse(&o, &argc, argv, err, sizeof(err)) < 0) {
		fprintf(stderr, "privai-fabric: %s\n", err);
		return 2;
	}
	const char *cmd = argv[first];
	argc -= first + 1;
	argv += first + 1;
	if (strcmp(cmd, "discover") == 0)
		return cmd_discover(&o, argc, argv);
	if (strcmp(cmd, "topology") == 0)
		return cmd_topology(&o, argc, argv);
	if (strcmp(cmd, "vmclass") == 0)
		return cmd_vmclass(&o, argc, argv);
	if (strcmp(cmd, "fm-config") == 0)
		return cmd_fm_config(&o, argc, argv);
	if (strcmp(cmd, "fm") == 0)
		return cmd_fm(&o, argc, argv);
	if (strcmp(cmd, "serve") == 0)
		return cmd_serve(&o, argc, argv);
	if (strcmp(cmd, "nccl-env") == 0)
		return cmd_nccl_env(&o, argc, argv);
	if (strcmp(cmd, "validate") == 0)
		return cmd_validate(&o, argc, argv);
	fprintf(stderr, "privai-fabric: no command '%s' (see --help)\n", cmd);
	return 2;
}
