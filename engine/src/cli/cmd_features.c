/*
 * privai-engine features: what this build can run on.  privai-admin reads
 * the JSON form at start and reports it with the node's inventory, so GPU
 * placements go only to nodes whose engine has the CUDA backend.
 */
#include <stdio.h>
#include <string.h>

#include "privai/chat.h"
#include "privai/compute.h"
#include "privai/status.h"
#include "privai/tensor_type.h"
#include "cli.h"

/* ,"key":"value" with the value escaped (a library's message may hold
 * quotes or control characters). */
static void
json_pair(int comma, const char *key, const char *value)
{
	printf("%s\"%s\":\"", comma ? "," : "", key);
	for (const unsigned char *p = (const unsigned char *)value; *p != '\0'; p++) {
		if (*p == '"' || *p == '\\')
			printf("\\%c", *p);
		else if (*p < 0x20)
			printf("\\u%04x", *p);
		else
			putchar(*p);
	}
	putchar('"');
}

/* How each weight type is multiplied on this CPU, for a decode step (one
 * token), a decode batch (8 sequences' tokens) and a prompt (128 tokens):
 * the CPU issue's "which path each type takes", from the same decision
 * the backend acts on. */
#define MAX_TYPE_ID 64
static void
print_paths(int json)
{
	int k = 0;

	for (uint32_t t = 0; t < MAX_TYPE_ID; t++) {
		const char *dec = compute_cpu_path(t, 1), *pre = compute_cpu_path(t, 128),
			   *batch = compute_cpu_path(t, 8);
		if (dec == NULL || pre == NULL || batch == NULL)
			continue;
		if (json)
			printf("%s\"%s\":{\"decode\":\"%s\",\"prefill\":\"%s\",\"batch\":\"%s\"}", k++ ? "," : "",
			       tensor_type_name(t), dec, pre, batch);
		else if (strcmp(batch, dec) != 0)
			printf("  %-7s decode: %s; a batch of 8: %s; prefill: %s\n", tensor_type_name(t), dec, batch,
			       pre);
		else
			printf("  %-7s decode: %s; prefill: %s\n", tensor_type_name(t), dec, pre);
	}
}

int
cmd_features(int argc, char **argv)
{
	int json = 0, l2_ahead, l1_ahead;
	double speedup;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0) {
			json = 1;
		} else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
			puts("usage: privai-engine features [--json]   backends, CPU kernels and chat templates of "
			     "this build");
			return 0;
		} else {
			return cli_error("features", "unknown option '%s'", argv[i]);
		}
	}
	compute_cpu_prefetch_ahead(&l2_ahead, &l1_ahead);
	/* a backend is listed only when it can run here; the others say why */
	const char *const *b = compute_backends();
	char info[8][128], why[8][PRIVAI_ERR_LEN];
	int ok[8], n = 0;
	for (; n < 8 && b[n] != NULL; n++)
		ok[n] = compute_probe(b[n], info[n], why[n]) == PRIVAI_OK;
	if (json) {
		fputs("{\"backends\":[", stdout);
		for (int i = 0, k = 0; i < n; i++)
			if (ok[i])
				printf("%s\"%s\"", k++ ? "," : "", b[i]);
		fputs("],\"devices\":{", stdout);
		for (int i = 0, k = 0; i < n; i++)
			if (ok[i])
				json_pair(k++, b[i], info[i]);
		fputs("},\"unavailable\":{", stdout);
		for (int i = 0, k = 0; i < n; i++)
			if (!ok[i])
				json_pair(k++, b[i], why[i]);
		printf("},\"cpu_simd\":\"%s\",\"cpu_decode_prefetch\":%s,\"cpu_prefetch_l2_ahead\":%d,"
		       "\"cpu_prefetch_l1_ahead\":%d,\"cpu_wide_prefetch\":%s",
		       compute_cpu_simd_name(), compute_cpu_prefetch() ? "true" : "false", l2_ahead, l1_ahead,
		       compute_cpu_wide_prefetch() ? "true" : "false");
		int pairs = compute_cpu_pairs(&speedup);
		printf(",\"cpu_pairs\":%s,\"cpu_vnni512_speedup\":%.2f", pairs ? "true" : "false", speedup);
		json_pair(1, "cpu_onednn", compute_cpu_onednn());
		fputs(",\"cpu_paths\":{", stdout);
		print_paths(1);
		/* the transports a model split over ranks can use here */
		const char *const *tr = coll_transports();
		int k = 0;
		fputs("},\"collectives\":[", stdout);
		for (int i = 0; tr[i] != NULL; i++)
			if (coll_probe(tr[i], why[0]) == PRIVAI_OK)
				printf("%s\"%s\"", k++ ? "," : "", tr[i]);
		fputs("],\"collectives_unavailable\":{", stdout);
		k = 0;
		for (int i = 0; tr[i] != NULL; i++)
			if (coll_probe(tr[i], why[0]) != PRIVAI_OK)
				json_pair(k++, tr[i], why[0]);
		fputs("},\"chat_templates\":[", stdout);
		for (const char *const *t = chat_template_names(); *t != NULL; t++)
			printf("%s\"%s\"", t == chat_template_names() ? "" : ",", *t);
		fputs("]}\n", stdout);
		return 0;
	}
	for (int i = 0; i < n; i++)
		printf("%-5s %s\n", b[i], ok[i] ? info[i] : why[i]);
	printf("onednn %s\n", compute_cpu_onednn());
	for (const char *const *t = coll_transports(); *t != NULL; t++)
		printf("tp/%-4s %s\n", *t, coll_probe(*t, why[0]) == PRIVAI_OK ? "available" : why[0]);
	if (compute_cpu_prefetch())
		printf("cpu decode prefetch: one token, quantized on (each line asked for %d bytes ahead into L2 "
		       "and %d into L1)",
		       l2_ahead, l1_ahead);
	else
		printf("cpu decode prefetch: one token, quantized sparse (a line 8 KB ahead every 2 KB or so, the "
		       "hardware prefetcher between)");
	printf("; float rows and batches %s\n", compute_cpu_wide_prefetch() ? "on" : "off");
	int pairs = compute_cpu_pairs(&speedup);
	if (speedup <= 0)
		puts("cpu pairs: off, no 512-bit vectors");
	else if (pairs || speedup >= COMPUTE_CPU_PAIRS_MIN_SPEEDUP)
		printf("cpu pairs: %s (a 512-bit vpdpbusd does %.2fx a 256-bit one's products here)\n",
		       pairs ? "two tokens a 512-bit vector in the 8-row groups" : "off, PRIVAI_PAIRS=0", speedup);
	else
		printf("cpu pairs: off, a token a 256-bit vector in the 8-row groups (a 512-bit vpdpbusd does %.2fx a "
		       "256-bit one's products here, the pairs take %.1fx; PRIVAI_PAIRS=1 forces them)\n",
		       speedup, COMPUTE_CPU_PAIRS_MIN_SPEEDUP);
	puts("cpu paths:");
	print_paths(0);
	fputs("chat templates:", stdout);
	for (const char *const *t = chat_template_names(); *t != NULL; t++)
		printf(" %s", *t);
	putchar('\n');
	return 0;
}
