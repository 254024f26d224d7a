/* The MIG planner against the profile tables and the layouts NVIDIA
 * documents as valid or invalid. */
#include <stdio.h>
#include <string.h>

#include "testlib.h"
#include "gpu/mig.h"

/* "3g.40gb@0 4g.40gb@-1 ..." -> instances */
static int
parse(const struct mig_gpu *g, const char *spec, struct mig_instance *in)
{
	char buf[256], *save = NULL;
	int n = 0;

	snprintf(buf, sizeof(buf), "%s", spec);
	for (char *w = strtok_r(buf, " ", &save); w != NULL; w = strtok_r(NULL, " ", &save)) {
		char *at = strchr(w, '@');
		if (at != NULL)
			*at = '\0';
		in[n].profile = mig_profile_find(g, w);
		in[n].start = at != NULL ? atoi(at + 1) : -1;
		if (in[n].profile == NULL)
			return -1;
		n++;
	}
	return n;
}

static int
valid(const struct mig_gpu *g, const char *spec, char *why)
{
	struct mig_instance in[16];
	int n = parse(g, spec, in);

	return n >= 0 && mig_layout_check(g, in, n, why, 160) == 0;
}

static int
placeable(const struct mig_gpu *g, const char *spec, char *why, char *out)
{
	struct mig_instance in[16];
	int n = parse(g, spec, in);

	if (n < 0 || mig_layout_place(g, in, n, why, 160) < 0)
		return 0;
	out[0] = '\0';
	for (int i = 0; i < n; i++)
		sprintf(out + strlen(out), "%s%s@%d", i ? " " : "", in[i].profile->name, in[i].start);
	return 1;
}

int
main(void)
{
	char why[160], out[256];
	const struct mig_gpu *h100 = mig_gpu_find("H100-80GB"), *h200 = mig_gpu_find("H200-141GB");
	const struct mig_gpu *a40 = mig_gpu_find("A100-40GB"), *a80 = mig_gpu_find("A100-80GB");

	CHECK(h100 && h200 && a40 && a80, "four tables");
	if (!(h100 && h200 && a40 && a80))
		return test_summary();
	/* the H100 list and counts from the field: 1g.10gb x7, 1g.20gb x4, 2g.20gb x3, 3g.40gb x2, 4g.40gb x1, 7g.80gb x1 */
	static const struct {
		const char *name;
		int max, id;
	} h[] = {
		{ "1g.10gb", 7, 19 }, { "1g.20gb", 4, 15 }, { "2g.20gb", 3, 14 },    { "3g.40gb", 2, 9 },
		{ "4g.40gb", 1, 5 },  { "7g.80gb", 1, 0 },  { "1g.10gb+me", 1, 20 },
	};
	for (size_t i = 0; i < sizeof(h) / sizeof(h[0]); i++) {
		const struct mig_profile *p = mig_profile_find(h100, h[i].name);
		CHECK(p && p->max == h[i].max && p->nvml_id == h[i].id, "H100 %s x%d (NVML id %d)", h[i].name, h[i].max,
		      h[i].id);
	}
	CHECK(mig_profile_find(h200, "3g.71gb") && mig_profile_find(h200, "7g.141gb") &&
		      mig_profile_find(a40, "1g.5gb") && mig_profile_find(a40, "7g.40gb") &&
		      mig_profile_find(a80, "2g.20gb"),
	      "H200 and A100 profile names");
	CHECK(mig_gpu_for_device("NVIDIA H100 80GB HBM3", 85520809984ull) == h100 &&
		      mig_gpu_for_device("NVIDIA H200", 150754820096ull) == h200 &&
		      mig_gpu_for_device("NVIDIA A100-SXM4-40GB", 42505273344ull) == a40 &&
		      mig_gpu_for_device("NVIDIA A100-SXM4-80GB", 85899345920ull) == a80 &&
		      mig_gpu_for_device("NVIDIA H100 NVL", 100931731456ull) == NULL &&
		      mig_gpu_for_device("NVIDIA L40S", 48305799168ull) == NULL,
	      "device names to tables");

	/* layouts NVIDIA lists as valid */
	static const char *const ok[] = {
		"7g.80gb@0",
		"4g.40gb@0 3g.40gb@4",
		"3g.40gb@0 3g.40gb@4",
		"2g.20gb@0 2g.20gb@2 2g.20gb@4 1g.10gb@6",
		"3g.40gb@0 2g.20gb@4 1g.10gb@6",
		"1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 1g.10gb@4 1g.10gb@5 1g.10gb@6",
		"1g.20gb@0 1g.20gb@2 1g.20gb@4 1g.20gb@6",
		"4g.40gb@0 2g.20gb@4 1g.10gb@6",
		"1g.10gb+me@3 3g.40gb@4 1g.10gb@0",
	};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		CHECK(valid(h100, ok[i], why), "valid: %s (%s)", ok[i], why);
	/* and ones it refuses, each for its rule */
	static const struct {
		const char *spec, *rule;
	} bad[] = {
		{ "1g.10gb@7", "cannot start at slot 7" },
		{ "3g.40gb@2", "cannot start at slot 2" },
		{ "4g.40gb@0 4g.40gb@0", "at most 1" },
		{ "4g.40gb@0 3g.40gb@0", "overlaps" },
		{ "7g.80gb@0 1g.10gb@0", "overlaps" },
		{ "1g.10gb+me@0 1g.10gb+me@1", "at most 1" },
		{ "2g.20gb@0 2g.20gb@2 2g.20gb@4 1g.20gb@4", "overlaps" },
		{ "1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 1g.10gb@4 1g.10gb@5 1g.10gb@6 1g.10gb@6", "at most 7" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int v = valid(h100, bad[i].spec, why);
		CHECK(!v && strstr(why, bad[i].rule) != NULL, "invalid: %s -> '%s' (got '%s')", bad[i].spec,
		      bad[i].rule, why);
	}
	struct mig_instance in[8];
	CHECK(parse(h100, "5g.50gb", in) < 0, "unknown profile name");
	in[0].profile = mig_profile_find(h200, "1g.18gb");
	in[0].start = 0;
	CHECK(mig_layout_check(h100, in, 1, why, sizeof(why)) < 0 && strstr(why, "another GPU type"),
	      "a profile of another table: %s", why);

	/* automatic placement */
	CHECK(placeable(h100, "3g.40gb 3g.40gb", why, out) && strcmp(out, "3g.40gb@0 3g.40gb@4") == 0, "3g+3g: %s",
	      out);
	CHECK(placeable(h100, "3g.40gb 4g.40gb", why, out) && strcmp(out, "3g.40gb@4 4g.40gb@0") == 0, "4g takes 0: %s",
	      out);
	CHECK(placeable(h100, "1g.10gb 2g.20gb 2g.20gb 2g.20gb", why, out), "2g x3 + 1g: %s", why);
	CHECK(placeable(h100, "1g.10gb 1g.10gb 1g.10gb 1g.10gb 1g.10gb 1g.10gb 1g.10gb", why, out), "1g x7");
	CHECK(!placeable(h100, "4g.40gb 2g.20gb 2g.20gb", why, out) && strstr(why, "do not fit"),
	      "4g+2g+2g has no placement (2g cannot start at 6): %s", why);
	CHECK(placeable(h100, "3g.40gb@4 4g.40gb", why, out) && strcmp(out, "3g.40gb@4 4g.40gb@0") == 0,
	      "a fixed 3g at 4 leaves room for a 4g at 0: %s", out);
	CHECK(!placeable(h100, "3g.40gb@0 4g.40gb", why, out), "but a 3g at 0 leaves none");
	CHECK(placeable(h100, "3g.40gb@0 2g.20gb 1g.20gb", why, out) &&
		      strcmp(out, "3g.40gb@0 2g.20gb@4 1g.20gb@6") == 0,
	      "fixed starts kept: %s", out);
	for (int k = 0; k < h100->n_profiles; k++) {
		const struct mig_profile *p = &h100->profiles[k];
		char spec[256] = "";
		for (int i = 0; i < p->max; i++)
			sprintf(spec + strlen(spec), "%s%s", i ? " " : "", p->name);
		CHECK(placeable(h100, spec, why, out), "%d x %s fit", p->max, p->name);
		sprintf(spec + strlen(spec), " %s", p->name);
		CHECK(!placeable(h100, spec, why, out), "%d x %s do not", p->max + 1, p->name);
	}

	/* free starts for the editor */
	int starts[8], n;
	parse(h100, "3g.40gb@0", in);
	n = mig_free_starts(h100, in, 1, mig_profile_find(h100, "3g.40gb"), starts);
	CHECK(n == 1 && starts[0] == 4, "beside a 3g at 0, a 3g only at 4");
	n = mig_free_starts(h100, in, 1, mig_profile_find(h100, "1g.10gb"), starts);
	CHECK(n == 3 && starts[0] == 4 && starts[2] == 6, "and a 1g at 4, 5, 6 (%d)", n);
	n = mig_free_starts(h100, in, 1, mig_profile_find(h100, "4g.40gb"), starts);
	CHECK(n == 0, "and no 4g");
	return test_summary();
}
