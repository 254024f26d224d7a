/*
 * privai-firstboot: day-0 configuration (firstboot.h).  Run at every boot
 * by privai-firstboot.service, before the network and privai-admin: what
 * is in place already is left alone, what changed (a vApp property edited,
 * then a reboot) is applied.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "firstboot.h"
#include "hostfs.h"

static void
usage(FILE *fp)
{
	fputs("usage: privai-firstboot [options]\n"
	      "  --root DIR          the system to configure (default /; a scratch tree in tests)\n"
	      "  --conf FILE         the image's defaults (default /etc/privai/appliance.conf)\n"
	      "  --cloud-config FILE cloud-init's config (default: the user-data cloud-init's local stage\n"
	      "                      stored, /var/lib/cloud/instance/user-data.txt, when it is a\n"
	      "                      #cloud-config document, else the merged cloud-config.txt)\n"
	      "  --ovf-env FILE      an OVF environment to read (default: vSphere's guestinfo.ovfEnv\n"
	      "                      through vmware-rpctool, else ovf-env.xml on a CD, when --root is /)\n"
	      "  --keys              print the keys as a Markdown table (docs/cloud-init.md) and exit\n"
	      "  --keys-json         print the keys as JSON (the OVA's ProductSection is made from it)\n"
	      "  --check             read and check the sources, print what would apply, change nothing\n"
	      "  --strict            exit 3 when a value was refused or a step failed (default: 0, so\n"
	      "                      the boot goes on; the problems are reported either way)\n"
	      "Paths given with --conf/--cloud-config/--ovf-env are inside --root.\n",
	      fp);
}

/*
 * Where cloud-init's config is when we run, before the network: its local
 * stage has stored the user-data it read (user-data.txt); the merged
 * cloud-config.txt is written only later, by its network stage, so it is
 * there at this point only from an earlier boot.  A user-data that is one
 * cloud-config document is read as it is; a multipart one through the
 * merged file, which then lags one boot behind.
 */
static const char *
cloud_config_path(const char *root)
{
	static const char *const raw = "/var/lib/cloud/instance/user-data.txt",
				 *const merged = "/var/lib/cloud/instance/cloud-config.txt";
	char head[16] = "";

	if (hostfs_read_line(root, raw, head, sizeof(head)) == 0 && strncmp(head, "#cloud-config", 13) == 0)
		return raw;
	return merged;
}

/* Each key with what an OVF ProductSection needs to describe it. */
static int
print_keys_json(void)
{
	cJSON *list = cJSON_CreateArray();
	char *text;

	for (int k = 0; list != NULL && k < FB_NKEYS; k++) {
		const struct fb_key_info *i = &fb_keys[k];
		cJSON *o = cJSON_CreateObject();
		if (o == NULL || !cJSON_AddItemToArray(list, o)) {
			cJSON_Delete(o);
			cJSON_Delete(list);
			list = NULL;
			break;
		}
		cJSON_AddStringToObject(o, "name", i->name);
		char ovf_key[64];
		snprintf(ovf_key, sizeof(ovf_key), "privai.%s", i->name);
		cJSON_AddStringToObject(o, "ovf_key", ovf_key);
		cJSON_AddStringToObject(o, "label", i->label);
		cJSON_AddStringToObject(o, "description", i->description);
		cJSON_AddStringToObject(o, "group", i->group);
		cJSON_AddBoolToObject(o, "secret", i->secret);
		cJSON_AddBoolToObject(o, "base64_in_ovf", i->ovf_base64);
		cJSON_AddNumberToObject(o, "max_length", (double)i->max_len);
		if (i->choices != NULL)
			cJSON_AddStringToObject(o, "choices", i->choices);
	}
	if (list == NULL || (text = cJSON_Print(list)) == NULL) {
		cJSON_Delete(list);
		fputs("privai-firstboot: out of memory\n", stderr);
		return 1;
	}
	puts(text);
	free(text);
	cJSON_Delete(list);
	return 0;
}

int
main(int argc, char **argv)
{
	const char *root = "/", *conf = "/etc/privai/appliance.conf", *cloud = NULL, *ovf = NULL;
	int check = 0, strict = 0;
	struct fb_config c;
	struct fb_step steps[FB_NSTEPS];
	char source[160];

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			usage(stdout);
			return 0;
		} else if (strcmp(a, "--keys") == 0) {
			printf("| key | OVF property | what | secret |\n| --- | --- | --- | --- |\n");
			for (int k = 0; k < FB_NKEYS; k++)
				printf("| `%s` | `privai.%s` | %s%s | %s |\n", fb_keys[k].name, fb_keys[k].name,
				       fb_keys[k].description, fb_keys[k].ovf_base64 ? " (base64 in OVF)" : "",
				       fb_keys[k].secret ? "yes" : "");
			return 0;
		} else if (strcmp(a, "--keys-json") == 0) {
			return print_keys_json();
		} else if (strcmp(a, "--check") == 0) {
			check = 1;
		} else if (strcmp(a, "--strict") == 0) {
			strict = 1;
		} else if (v != NULL && strcmp(a, "--root") == 0) {
			root = argv[++i];
		} else if (v != NULL && strcmp(a, "--conf") == 0) {
			conf = argv[++i];
		} else if (v != NULL && strcmp(a, "--cloud-config") == 0) {
			cloud = argv[++i];
		} else if (v != NULL && strcmp(a, "--ovf-env") == 0) {
			ovf = argv[++i];
		} else {
			fprintf(stderr, "privai-firstboot: unknown option or missing value: %s\n", a);
			usage(stderr);
			return 2;
		}
	}
	fb_config_init(&c);
	if (c.warnings == NULL) {
		fprintf(stderr, "privai-firstboot: out of memory\n");
		return 1;
	}
	fb_read_conf(&c, root, conf);
	fb_read_cloud_config(&c, root, cloud != NULL ? cloud : cloud_config_path(root));
	char *xml = NULL;
	if (ovf != NULL) {
		if ((xml = hostfs_read_text(root, ovf, 1 << 20, NULL)) == NULL)
			fb_warn(&c, "--ovf-env %s cannot be read", ovf);
		snprintf(source, sizeof(source), "ovf (%s)", ovf);
	} else {
		xml = fb_find_ovf_env(root, source, sizeof(source));
	}
	if (xml != NULL) {
		fb_read_ovf_env(&c, xml, strlen(xml), source);
		free(xml);
	}
	int bad = 0;
	for (int k = 0; k < FB_NKEYS; k++)
		if (c.v[k].value != NULL) {
			bad |= c.v[k].problem[0] != '\0';
			if (check)
				printf("%-15s %-10s %s%s%s\n", fb_keys[k].name, c.v[k].problem[0] ? "REFUSED" : "ok",
				       c.v[k].source, c.v[k].problem[0] ? ": " : "", c.v[k].problem);
		}
	if (check) {
		cJSON *w;
		cJSON_ArrayForEach (w, c.warnings)
			printf("warning: %s\n", w->valuestring);
		fb_config_free(&c);
		return strict && bad ? 3 : 0;
	}
	struct fb_apply_opts o = { .root = root, .live = strcmp(root, "/") == 0 };
	fb_apply(&c, &o, steps);
	int rc = fb_report(&c, steps, &o, (long long)time(NULL));
	for (int i = 0; i < FB_NSTEPS; i++)
		bad |= steps[i].state == FB_REFUSED || steps[i].state == FB_FALLBACK || steps[i].state == FB_FAILED;
	fb_config_free(&c);
	if (rc < 0)
		return 1;
	return strict && bad ? 3 : 0;
}
