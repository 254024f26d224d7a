/* The node inventory read from recorded /proc and /sys trees: a
 * two-socket Xeon with AMX, a tree of garbage, a tree that is not there,
 * and this machine's own. */
#include <stdio.h>
#include <string.h>

#include "testlib.h"
#include "node_info.h"

int
main(void)
{
	static struct node_info ni;

	node_info_read("tests/fixtures/hosts/xeon-amx-2s", &ni);
	CHECK(strcmp(ni.cpu_model, "Intel(R) Xeon(R) Platinum 8480+") == 0, "model '%s'", ni.cpu_model);
	CHECK(ni.cpu_sockets == 2 && ni.cpu_cores == 8 && ni.cpu_threads == 16,
	      "2 sockets, 8 cores, 16 threads: "
	      "%d %d %d",
	      ni.cpu_sockets, ni.cpu_cores, ni.cpu_threads);
	CHECK(strcmp(ni.cpu_flags, "avx2 fma f16c avx512f avx512bw avx512_vnni avx512_bf16 avx512_fp16 amx_tile "
				   "amx_bf16 amx_int8") == 0,
	      "flags kept: '%s'", ni.cpu_flags);
	CHECK(ni.memory_bytes == 65536000LL * 1024, "memory %lld", (long long)ni.memory_bytes);
	CHECK(ni.numa_nodes == 2 && ni.numa[0].id == 0 && strcmp(ni.numa[1].cpulist, "4-7,12-15") == 0 &&
		      ni.numa[1].memory_bytes == 32768000LL * 1024,
	      "two NUMA nodes with CPUs and memory");
	CHECK(strcmp(ni.kernel, "6.1.0-26-amd64") == 0 && strcmp(ni.hostname, "appliance-a") == 0, "kernel, host");
	CHECK(ni.n_nics == 2, "lo left out: %d NICs", ni.n_nics);
	CHECK(strcmp(ni.nics[0].name, "br0") == 0 && ni.nics[0].speed_mbps == -1 && !ni.nics[0].physical &&
		      ni.nics[0].numa_node == -1,
	      "bridge: garbage speed is unknown, not physical");
	CHECK(strcmp(ni.nics[1].name, "ens1f0") == 0 && ni.nics[1].speed_mbps == 100000 && ni.nics[1].physical &&
		      ni.nics[1].numa_node == 1 && ni.nics[1].mtu == 9000 &&
		      strcmp(ni.nics[1].mac, "b8:ce:f6:01:02:03") == 0,
	      "ConnectX port: 100 Gb/s, NUMA 1, MTU 9000");
	CHECK(ni.missing[0] == '\0', "nothing missing: '%s'", ni.missing);

	cJSON *j = node_info_json(&ni);
	cJSON *cpu = cJSON_GetObjectItem(j, "cpu");
	CHECK(cJSON_IsTrue(cJSON_GetObjectItem(cpu, "amx")) && cJSON_IsTrue(cJSON_GetObjectItem(cpu, "avx512")) &&
		      cJSON_GetArraySize(cJSON_GetObjectItem(j, "nics")) == 2 &&
		      cJSON_GetArraySize(cJSON_GetObjectItem(j, "numa")) == 2,
	      "JSON: amx, avx512, NICs, NUMA");
	cJSON_Delete(j);

	node_info_read("tests/fixtures/hosts/garbage", &ni);
	CHECK(ni.memory_bytes == 0 && ni.cpu_model[0] == '\0' && ni.cpu_flags[0] == '\0' && ni.numa_nodes == 0 &&
		      ni.n_nics == 0,
	      "garbage: unknowns, no crash");
	CHECK(strstr(ni.missing, "/proc/meminfo") && strstr(ni.missing, "/sys/class/net") &&
		      strstr(ni.missing, "osrelease"),
	      "garbage: missing sources named: '%s'", ni.missing);
	/* ids past 65535 or below 0 are skipped, not multiplied into a key */
	CHECK(ni.cpu_sockets == 1 && ni.cpu_cores == 1, "garbage: one socket and one core of sane ids: %d %d",
	      ni.cpu_sockets, ni.cpu_cores);

	node_info_read("/nonexistent-root", &ni);
	CHECK(strstr(ni.missing, "/proc/cpuinfo") && ni.cpu_threads == 0, "no tree: cpuinfo named missing");

	node_info_read("/", &ni);
	CHECK(ni.cpu_threads > 0 && ni.memory_bytes > 0 && ni.kernel[0] != '\0', "this machine: %d threads",
	      ni.cpu_threads);
	return test_summary();
}
