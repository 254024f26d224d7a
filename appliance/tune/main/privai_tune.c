/*
 * privai-tune: the host's preflight checks (and, next, its tuning).
 *
 *   privai-tune check [--json] [--root DIR] [--profile NAME]
 *
 * Exit status: 0 when no check failed, 1 when one did, 2 on a usage or
 * read error.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tune.h"

static void
usage(FILE *fp)
{
	fprintf(fp,
		"usage: privai-tune check [--json] [--root DIR] [--profile NAME]\n"
		"\n"
		"  check           preflight report: CPU, memory, GPUs, PCIe, NICs, Fabric Manager, VM\n"
		"  --json          the report as JSON\n"
		"  --root DIR      read /proc, /sys and /etc under DIR (default /; env PRIVAI_TUNE_ROOT)\n"
		"  --profile NAME  gpu-inference or cpu-inference (default: gpu-inference where\n"
		"                  there are NVIDIA GPUs; env PRIVAI_TUNE_PROFILE)\n"
		"\n"
		"Exit status: 0 no check failed, 1 a check failed, 2 usage or read error.\n");
}

static void
print_text(const struct report *r, const struct tune_host *h)
{
	printf("privai-tune check: root %s, profile %s\n\n", h->root, h->profile->name);
	for (int i = 0; i < r->n; i++) {
		const struct check *c = &r->c[i];
		printf("%-4s  %-22s %s\n", check_status_name(c->status), c->id, c->found);
		if (c->status == CHECK_WARN || c->status == CHECK_FAIL) {
			if (c->expected[0])
				printf("      %-22s expected: %s\n", "", c->expected);
			if (c->fix[0])
				printf("      %-22s fix: %s\n", "", c->fix);
		}
	}
	printf("\n%d pass, %d warn, %d fail, %d skip\n", report_count(r, CHECK_PASS), report_count(r, CHECK_WARN),
	       report_count(r, CHECK_FAIL), report_count(r, CHECK_SKIP));
}

static int
cmd_check(const char *root, const char *profile, int json)
{
	struct tune_host h;
	struct report r = { 0 };
	char err[256];
	int rc;

	if (tune_host_read(root, profile, &h, err, sizeof(err)) < 0) {
		fprintf(stderr, "privai-tune: %s\n", err);
		return 2;
	}
	tune_check(&h, &r);
	if (r.oom) {
		fprintf(stderr, "privai-tune: out of memory building the report\n");
		rc = 2;
	} else if (json) {
		cJSON *o = report_json(&r, root, h.profile->name);
		char *s = o != NULL ? cJSON_Print(o) : NULL;
		if (s == NULL) {
			fprintf(stderr, "privai-tune: out of memory writing JSON\n");
			rc = 2;
		} else {
			printf("%s\n", s);
			rc = report_count(&r, CHECK_FAIL) > 0;
		}
		free(s);
		cJSON_Delete(o);
	} else {
		print_text(&r, &h);
		rc = report_count(&r, CHECK_FAIL) > 0;
	}
	report_free(&r);
	tune_host_free(&h);
	return rc;
}

int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "root", required_argument, NULL, 'r' },
		{ "profile", required_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *root = getenv("PRIVAI_TUNE_ROOT"), *profile = getenv("PRIVAI_TUNE_PROFILE");
	struct stat st = { 0 };
	int json = 0, o;

	if (root == NULL || *root == '\0')
		root = "/";
	if (profile != NULL && *profile == '\0')
		profile = NULL;
	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case 'j': json = 1; break;
		case 'r': root = optarg; break;
		case 'p': profile = optarg; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return 2;
	}
	if (strcmp(argv[optind], "check") != 0) {
		fprintf(stderr, "privai-tune: unknown command '%s' (have: check)\n", argv[optind]);
		return 2;
	}
	if (optind + 1 < argc) {
		fprintf(stderr, "privai-tune: unexpected argument '%s'\n", argv[optind + 1]);
		return 2;
	}
	if (stat(root, &st) < 0 || !S_ISDIR(st.st_mode)) {
		fprintf(stderr, "privai-tune: --root %s: %s\n", root, S_ISDIR(st.st_mode) || errno != 0 ? strerror(errno) : "not a directory");
		return 2;
	}
	return cmd_check(root, profile, json);
}
