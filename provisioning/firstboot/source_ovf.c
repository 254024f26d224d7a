/*
 * Source 3: the OVF environment, the properties typed into vSphere's
 * deploy wizard (or written into an ovf-env.xml on a CD for other
 * hypervisors).  Keys are "privai." + the key's name; PEM values come
 * base64-encoded.  Parsed with libxml2, without network access and
 * without expanding entities.
 */
#include <errno.h>
#include <libxml/parser.h>
#include <libxml/tree.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "status.h"
#include "strfmt.h"
#include "firstboot.h"
#include "hostfs.h"

#define OVF_ENV_NS "http://schemas.dmtf.org/ovf/environment/1"
#define OVF_MAX (1 << 20)

static int
is(const xmlNode *n, const char *name)
{
	return n->type == XML_ELEMENT_NODE && xmlStrcmp(n->name, (const xmlChar *)name) == 0;
}

/* base64 (whitespace allowed) to a new NUL-terminated string, or NULL */
static char *
unbase64(const char *b64)
{
	size_t cap = strlen(b64), n;
	char *out = malloc(cap + 1);

	if (out == NULL)
		return NULL;
	if (sodium_base642bin((unsigned char *)out, cap, b64, strlen(b64), " \t\r\n", &n, NULL,
			      sodium_base64_VARIANT_ORIGINAL) != 0 ||
	    memchr(out, '\0', n) != NULL) {
		free(out);
		return NULL;
	}
	out[n] = '\0';
	return out;
}

static void
take_property(struct fb_config *c, xmlNode *p, const char *source)
{
	xmlChar *key = xmlGetNsProp(p, (const xmlChar *)"key", (const xmlChar *)OVF_ENV_NS);
	xmlChar *value = xmlGetNsProp(p, (const xmlChar *)"value", (const xmlChar *)OVF_ENV_NS);
	const char *k = (const char *)key;
	int id;

	if (key == NULL || strncmp(k, "privai.", 7) != 0) {
		xmlFree(key);
		xmlFree(value);
		return; /* another product's property */
	}
	if ((id = fb_key_find(k + 7)) < 0) {
		fb_warn(c, "%s: property %.80s is not a key; ignored", source, k);
	} else if (value == NULL || value[0] == '\0') {
		/* vSphere sends every property, empty when left blank: not given */
	} else if (fb_keys[id].ovf_base64) {
		char *pem = unbase64((const char *)value);
		fb_config_set(c, (enum fb_key)id, pem != NULL ? pem : "", source);
		if (pem == NULL)
			snprintf(c->v[id].problem, sizeof(c->v[id].problem),
				 "in OVF this is the base64 of the PEM text");
		else
			sodium_memzero(pem, strlen(pem));
		free(pem);
	} else {
		fb_config_set(c, (enum fb_key)id, (const char *)value, source);
	}
	if (value != NULL)
		sodium_memzero(value, (size_t)xmlStrlen(value));
	xmlFree(key);
	xmlFree(value);
}

int
fb_read_ovf_env(struct fb_config *c, const char *xml, size_t len, const char *source)
{
	xmlDoc *doc;
	xmlNode *env;

	if (len > OVF_MAX) {
		fb_warn(c, "%s: larger than 1 MiB; not used", source);
		return -1;
	}
	doc = xmlReadMemory(xml, (int)len, "ovf-env.xml", NULL,
			    XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
	if (doc == NULL) {
		fb_warn(c, "%s: not well-formed XML; its properties are not used", source);
		return -1;
	}
	env = xmlDocGetRootElement(doc);
	if (env == NULL || !is(env, "Environment") || env->ns == NULL ||
	    xmlStrcmp(env->ns->href, (const xmlChar *)OVF_ENV_NS) != 0) {
		fb_warn(c, "%s: not an OVF environment (no Environment element in %s); not used", source, OVF_ENV_NS);
		xmlFreeDoc(doc);
		return -1;
	}
	for (xmlNode *s = env->children; s != NULL; s = s->next)
		if (is(s, "PropertySection"))
			for (xmlNode *p = s->children; p != NULL; p = p->next)
				if (is(p, "Property"))
					take_property(c, p, source);
	xmlFreeDoc(doc);
	return 0;
}

/* vSphere: the guestinfo variable, through open-vm-tools. */
static char *
from_rpctool(void)
{
	static const char *const tools[] = { "/usr/bin/vmware-rpctool", NULL };
	char *buf = NULL;
	size_t len = 0, cap = 0;

	for (const char *const *t = tools; *t != NULL; t++) {
		if (access(*t, X_OK) != 0)
			continue;
		char cmd[128];
		snprintf(cmd, sizeof(cmd), "%s 'info-get guestinfo.ovfEnv' 2>/dev/null", *t);
		FILE *fp = popen(cmd, "r");
		if (fp == NULL)
			return NULL;
		char chunk[4096];
		size_t n;
		while ((n = fread(chunk, 1, sizeof(chunk), fp)) > 0 && len + n < OVF_MAX) {
			if (len + n + 1 > cap) {
				char *grown = realloc(buf, cap = (len + n + 1) * 2);
				if (grown == NULL)
					break;
				buf = grown;
			}
			memcpy(buf + len, chunk, n);
			len += n;
			buf[len] = '\0';
		}
		if (pclose(fp) != 0 || len == 0) {
			free(buf);
			return NULL;
		}
		return buf;
	}
	return NULL;
}

/* Other hypervisors (and vSphere's "ISO image" transport): ovf-env.xml
 * on a CD, mounted read-only for the time it takes to read it. */
static char *
from_cdrom(char *ret_source, size_t size)
{
	static const char *const names[] = { "ovf-env.xml", "OVF-ENV.XML", "ovf_env.xml", "OVF_ENV.XML", NULL };
	const char *dir = "/run/privai-firstboot-cd";
	char dev[32], path[128];

	mkdir(dir, 0700);
	for (int i = 0; i < 4; i++) {
		snprintf(dev, sizeof(dev), "/dev/sr%d", i);
		if (access(dev, F_OK) != 0 ||
		    mount(dev, dir, "iso9660", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)
			continue;
		char *xml = NULL;
		for (const char *const *n = names; *n != NULL && xml == NULL; n++) {
			xml = str_fmt(path, sizeof(path), "%s/%s", dir, *n) == APP_OK
				      ? hostfs_read_text("/", path, OVF_MAX, NULL)
				      : NULL;
			if (xml != NULL)
				snprintf(ret_source, size, "ovf (%s on %s)", *n, dev);
		}
		umount2(dir, MNT_DETACH);
		if (xml != NULL) {
			rmdir(dir);
			return xml;
		}
	}
	rmdir(dir);
	return NULL;
}

char *
fb_find_ovf_env(const char *root, char *ret_source, size_t size)
{
	char *xml;

	if (strcmp(root, "/") != 0)
		return NULL; /* a scratch tree has no hypervisor */
	if ((xml = from_rpctool()) != NULL) {
		snprintf(ret_source, size, "ovf (vSphere guestinfo.ovfEnv)");
		return xml;
	}
	return from_cdrom(ret_source, size);
}
