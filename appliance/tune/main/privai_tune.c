/*
 * privai-tune: the host's preflight checks and its tuning.
 *
 *   privai-tune check [--json] [--root DIR] [--profile NAME]
 *   privai-tune apply [--dry-run] [--root DIR] [--profile NAME]
 *   privai-tune revert [--root DIR]
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

#include "apply.h"
#include "hostfs.h"
#include "tune.h"

static void
usage(FILE *fp)
{
	fprintf(fp, "usage: privai-tune check [--json | --output FILE] [--root DIR] [--profile NAME]\n"
		    "       privai-tune apply [--dry-run] [--root DIR] [--profile NAME]\n"
		    "       privai-tune revert [--root DIR]\n"
		    "\n"
		    "  check           preflight report: CPU, memory, GPUs, PCIe, NICs, Fabric Manager, VM\n"
		    "  apply           set the profile: governor, energy preference, THP, huge pages, NUMA\n"
		    "                  balancing, swappiness, NIC interrupts on their NUMA node, memlock\n"
		    "                  drop-in, GPU persistence daemon, nvidia_peermem at boot; the old\n"
		    "                  values are recorded in " TUNE_STATE_FILE " first\n"
		    "  revert          put back every value apply recorded, remove what it created\n"
		    "  --dry-run       say what apply would change, change nothing\n"
		    "  --json          the report as JSON\n"
		    "  --output FILE   the JSON report into FILE (replaced whole, never half-written)\n"
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
cmd_check(const char *root, const char *profile, int json, const char *output)
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
	} else if (json || output != NULL) {
		cJSON *o = report_json(&r, root, h.profile->name);
		char *s = o != NULL ? cJSON_Print(o) : NULL;
		if (s == NULL) {
			fprintf(stderr, "privai-tune: out of memory writing JSON\n");
			rc = 2;
		} else if (output != NULL && hostfs_write("/", output, s, strlen(s), 1) < 0) {
			fprintf(stderr, "privai-tune: cannot write %s: %s\n", output, strerror(errno));
			rc = 2;
		} else {
			if (output == NULL)
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

static int
cmd_apply(const char *root, const char *profile, int dry_run)
{
	struct tune_host h;
	struct plan p;
	char err[512] = "";
	int rc = 0;

	if (tune_host_read(root, profile, &h, err, sizeof(err)) < 0 || apply_plan(&h, &p, err, sizeof(err)) < 0) {
		fprintf(stderr, "privai-tune: %s\n", err);
		return 2;
	}
	printf("privai-tune apply%s: root %s, profile %s\n", dry_run ? " --dry-run" : "", root, h.profile->name);
	plan_print(&p, stdout, dry_run ? "would make" : "making");
	if (!dry_run && apply_run(&h, &p, stdout, err, sizeof(err)) < 0) {
		fprintf(stderr, "privai-tune: %s\n", err);
		rc = 1;
	}
	plan_free(&p);
	tune_host_free(&h);
	return rc;
}

static int
cmd_revert(const char *root)
{
	char err[512] = "";

	printf("privai-tune revert: root %s\n", root);
	if (apply_revert(root, stdout, err, sizeof(err)) < 0) {
		fprintf(stderr, "privai-tune: %s\n", err);
		return 1;
	}
	return 0;
}

int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "dry-run", no_argument, NULL, 'n' },
		{ "output", required_argument, NULL, 'o' },
		{ "root", required_argument, NULL, 'r' },
		{ "profile", required_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *root = getenv("PRIVAI_TUNE_ROOT"), *profile = getenv("PRIVAI_TUNE_PROFILE"), *output = NULL;
	struct stat st = { 0 };
	int json = 0, dry_run = 0, o;

	if (root == NULL || *root == '\0')
		root = "/";
	if (profile != NULL && *profile == '\0')
		profile = NULL;
	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case 'j':
			json = 1;
			break;
		case 'n':
			dry_run = 1;
			break;
		case 'o':
			output = optarg;
			break;
		case 'r':
			root = optarg;
			break;
		case 'p':
			profile = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return 2;
	}
	if (strcmp(argv[optind], "check") != 0 && strcmp(argv[optind], "apply") != 0 &&
	    strcmp(argv[optind], "revert") != 0) {
		fprintf(stderr, "privai-tune: unknown command '%s' (have: check, apply, revert)\n", argv[optind]);
		return 2;
	}
	if ((dry_run && strcmp(argv[optind], "apply") != 0) ||
	    ((json || output != NULL) && strcmp(argv[optind], "check") != 0)) {
		fprintf(stderr, "privai-tune: %s belongs to %s\n",
			dry_run ? "--dry-run"
			: json  ? "--json"
				: "--output",
			dry_run ? "apply" : "check");
		return 2;
	}
	if (output != NULL && output[0] != '/') {
		fprintf(stderr, "privai-tune: --output wants an absolute path, not '%s'\n", output);
		return 2;
	}
	if (optind + 1 < argc) {
		fprintf(stderr, "privai-tune: unexpected argument '%s'\n", argv[optind + 1]);
		return 2;
	}
	if (stat(root, &st) < 0 || !S_ISDIR(st.st_mode)) {
		fprintf(stderr, "privai-tune: --root %s: %s\n", root,
			S_ISDIR(st.st_mode) || errno != 0 ? strerror(errno) : "not a directory");
		return 2;
	}
	if (strcmp(argv[optind], "apply") == 0)
		return cmd_apply(root, profile, dry_run);
	if (strcmp(argv[optind], "revert") == 0)
		return cmd_revert(root);
	return cmd_check(root, profile, json, output);
}
