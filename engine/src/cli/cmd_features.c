/*
 * privai-engine features: what this build can run on.  privai-admin reads
 * the JSON form at start and reports it with the node's inventory, so GPU
 * placements go only to nodes whose engine has the CUDA backend.
 */
#include <stdio.h>
#include <string.h>

#include "privai/chat.h"
#include "privai/compute.h"
#include "cli.h"

int
cmd_features(int argc, char **argv)
{
	int json = 0;

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
	const char *const *b = compute_backends();
	if (json) {
		fputs("{\"backends\":[", stdout);
		for (int i = 0; b[i] != NULL; i++)
			printf("%s\"%s\"", i ? "," : "", b[i]);
		printf("],\"cpu_simd\":\"%s\",\"chat_templates\":[", compute_cpu_simd_name());
		for (const char *const *t = chat_template_names(); *t != NULL; t++)
			printf("%s\"%s\"", t == chat_template_names() ? "" : ",", *t);
		fputs("]}\n", stdout);
		return 0;
	}
	fputs("backends:", stdout);
	for (int i = 0; b[i] != NULL; i++)
		printf(" %s", b[i]);
	printf("\ncpu kernels: %s\nchat templates:", compute_cpu_simd_name());
	for (const char *const *t = chat_template_names(); *t != NULL; t++)
		printf(" %s", *t);
	putchar('\n');
	return 0;
}
