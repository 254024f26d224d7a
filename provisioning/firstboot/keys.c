/*
 * The keys day-0 configuration understands, and what a good value of
 * each looks like.  A check says what is wrong in words a person at the
 * machine's console can act on; it never echoes a secret.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "auth/auth.h"
#include "firstboot.h"

static int
fail(char *why, size_t size, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, size, fmt, ap);
	va_end(ap);
	return -1;
}

/* printable ASCII only: names, addresses, URLs, tokens */
static int
plain_ascii(const char *v)
{
	for (const unsigned char *p = (const unsigned char *)v; *p; p++)
		if (*p < 0x21 || *p > 0x7e)
			return 0;
	return 1;
}

static int
check_hostname(const char *v, char *why, size_t size)
{
	size_t n = strlen(v), label = 0;

	if (n == 0 || n > 253)
		return fail(why, size, "a host name has 1-253 characters");
	for (size_t i = 0; i <= n; i++) {
		char c = v[i];
		if (c == '.' || c == '\0') {
			if (label == 0 || label > 63)
				return fail(why, size, "each part of a host name has 1-63 characters");
			if (v[i - 1] == '-' || v[i - label] == '-')
				return fail(why, size, "a part of a host name neither starts nor ends with '-'");
			label = 0;
			continue;
		}
		if (!isalnum((unsigned char)c) && c != '-')
			return fail(why, size, "a host name holds letters, digits, '-' and '.' only");
		label++;
	}
	return 0;
}

static int
is_address(const char *s)
{
	unsigned char buf[16];

	return inet_pton(AF_INET, s, buf) == 1 || inet_pton(AF_INET6, s, buf) == 1;
}

static int
check_ip(const char *v, char *why, size_t size)
{
	char addr[64];
	const char *slash = strchr(v, '/');
	char *end;
	unsigned char buf[16];

	if (strcmp(v, "dhcp") == 0)
		return 0;
	if (slash == NULL || (size_t)(slash - v) >= sizeof(addr))
		return fail(why, size, "'dhcp' or an address with its prefix length, e.g. 10.0.0.5/24");
	memcpy(addr, v, (size_t)(slash - v));
	addr[slash - v] = '\0';
	int v4 = inet_pton(AF_INET, addr, buf) == 1, v6 = !v4 && inet_pton(AF_INET6, addr, buf) == 1;
	long prefix = strtol(slash + 1, &end, 10);
	if (!v4 && !v6)
		return fail(why, size, "'%s' is not an IPv4 or IPv6 address", addr);
	if (*end != '\0' || slash[1] == '\0' || prefix < 1 || prefix > (v4 ? 32 : 128))
		return fail(why, size, "the prefix length is 1-%d", v4 ? 32 : 128);
	return 0;
}

static int
check_address(const char *v, char *why, size_t size)
{
	return is_address(v) ? 0 : fail(why, size, "'%s' is not an IPv4 or IPv6 address", v);
}

/* A comma list of at most 8 items, each checked by one(). */
static int
check_list(const char *v, char *why, size_t size, int (*one)(const char *, char *, size_t))
{
	char item[256];
	int n = 0;

	for (const char *p = v; *p != '\0';) {
		size_t len = strcspn(p, ",");
		while (len > 0 && p[0] == ' ') {
			p++;
			len--;
		}
		if (len == 0 || len >= sizeof(item))
			return fail(why, size, "an empty or overlong item in the list");
		memcpy(item, p, len);
		item[len] = '\0';
		while (len > 0 && item[len - 1] == ' ')
			item[--len] = '\0';
		if (one(item, why, size) < 0)
			return -1;
		if (++n > 8)
			return fail(why, size, "at most 8 items");
		p += strcspn(p, ",");
		if (*p == ',')
			p++;
	}
	return n > 0 ? 0 : fail(why, size, "an empty list");
}

static int
check_dns(const char *v, char *why, size_t size)
{
	return check_list(v, why, size, check_address);
}

static int
one_ntp(const char *v, char *why, size_t size)
{
	return is_address(v) || check_hostname(v, why, size) == 0
		       ? 0
		       : fail(why, size, "'%s' is neither an address nor a host name", v);
}

static int
check_ntp(const char *v, char *why, size_t size)
{
	return check_list(v, why, size, one_ntp);
}

static int
check_password(const char *v, char *why, size_t size)
{
	char err[512];

	for (const unsigned char *p = (const unsigned char *)v; *p; p++)
		if (*p < 0x20 || *p == 0x7f)
			return fail(why, size, "the password holds a control character");
	if (auth_password_check("admin", v, err) != 0)
		return fail(why, size, "%s", err); /* the console's one rule */
	return 0;
}

static int
check_ssh_key(const char *v, char *why, size_t size)
{
	static const char *const types[] = { "ssh-ed25519",
					     "ssh-rsa",
					     "ecdsa-sha2-nistp256",
					     "ecdsa-sha2-nistp384",
					     "ecdsa-sha2-nistp521",
					     "sk-ssh-ed25519@openssh.com",
					     "sk-ecdsa-sha2-nistp256@openssh.com",
					     NULL };
	unsigned char blob[8192];
	size_t n, tl;
	const char *sp = strchr(v, ' ');
	int known = 0;

	if (strchr(v, '\n') != NULL || strchr(v, '\r') != NULL)
		return fail(why, size, "one key, on one line");
	for (const char *const *t = types; *t != NULL; t++)
		known |= sp != NULL && (size_t)(sp - v) == strlen(*t) && strncmp(v, *t, strlen(*t)) == 0;
	if (!known)
		return fail(why, size, "an OpenSSH public key: ssh-ed25519, ssh-rsa, ecdsa-sha2-* or sk-* then base64");
	tl = (size_t)(sp - v);
	const char *b64 = sp + 1, *end = strchr(b64, ' ');
	size_t b64_len = end != NULL ? (size_t)(end - b64) : strlen(b64);
	if (sodium_base642bin(blob, sizeof(blob), b64, b64_len, NULL, &n, NULL, sodium_base64_VARIANT_ORIGINAL) != 0 ||
	    n < 4 + tl)
		return fail(why, size, "the key's base64 part does not decode");
	/* the blob starts with its own type, length-prefixed */
	uint32_t blen = (uint32_t)blob[0] << 24 | (uint32_t)blob[1] << 16 | (uint32_t)blob[2] << 8 | blob[3];
	if (blen != tl || memcmp(blob + 4, v, tl) != 0)
		return fail(why, size, "the key's body is not a %.*s key", (int)tl, v);
	return 0;
}

static int
check_role(const char *v, char *why, size_t size)
{
	return strcmp(v, "leader") == 0 || strcmp(v, "member") == 0 ? 0 : fail(why, size, "'leader' or 'member'");
}

static int
check_url(const char *v, char *why, size_t size)
{
	const char *host = strncmp(v, "https://", 8) == 0 ? v + 8 : strncmp(v, "http://", 7) == 0 ? v + 7 : NULL;

	if (host == NULL || !plain_ascii(v) || *host == '\0' || *host == '/')
		return fail(why, size, "the leader's console URL, https://HOST[:PORT]");
	return 0;
}

static int
check_join_token(const char *v, char *why, size_t size)
{
	if (strncmp(v, "join_", 5) != 0 || strlen(v) != 48 ||
	    strspn(v + 5, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklm"
			  "nopqrstuvwxyz0123456789-_") != 43)
		return fail(why, size, "the join token the leader's console showed: join_ and 43 characters");
	return 0;
}

static int
check_pin(const char *v, char *why, size_t size)
{
	unsigned char bin[64];
	size_t n;

	if (strncmp(v, "sha256//", 8) != 0 ||
	    sodium_base642bin(bin, sizeof(bin), v + 8, strlen(v + 8), NULL, &n, NULL, sodium_base64_VARIANT_ORIGINAL) !=
		    0 ||
	    n != 32)
		return fail(why, size,
			    "sha256// and the base64 SHA-256 of the leader's public key, as its join token showed");
	return 0;
}

static int
check_pem(const char *v, const char *const *labels, char *why, size_t size, const char *what)
{
	for (const char *const *l = labels; *l != NULL; l++) {
		char begin[64], end[64];
		snprintf(begin, sizeof(begin), "-----BEGIN %s-----", *l);
		snprintf(end, sizeof(end), "-----END %s-----", *l);
		const char *b = strstr(v, begin);
		if (b != NULL && strstr(b, end) != NULL)
			return 0;
	}
	return fail(why, size, "not a PEM %s", what);
}

static int
check_cert(const char *v, char *why, size_t size)
{
	static const char *const labels[] = { "CERTIFICATE", NULL };

	return check_pem(v, labels, why, size, "certificate");
}

static int
check_key(const char *v, char *why, size_t size)
{
	static const char *const labels[] = { "PRIVATE KEY", "EC PRIVATE KEY", "RSA PRIVATE KEY", NULL };

	if (strstr(v, "ENCRYPTED") != NULL)
		return fail(why, size, "the private key is encrypted; give it without a passphrase");
	return check_pem(v, labels, why, size, "private key");
}

static int
one_model(const char *v, char *why, size_t size)
{
	size_t n = strlen(v);

	if (v[0] != '/' || strstr(v, "/../") != NULL || n < 6 || strcmp(v + n - 5, ".gguf") != 0 || !plain_ascii(v))
		return fail(why, size, "'%s' is not an absolute path to a .gguf file", v);
	return 0;
}

static int
check_models(const char *v, char *why, size_t size)
{
	return check_list(v, why, size, one_model);
}

const struct fb_key_info fb_keys[FB_NKEYS] = {
	[FB_HOSTNAME] = { "hostname", 0, 0, 253, check_hostname, "Host name", "The appliance's host name", "Network",
			  NULL },
	[FB_IP] = { "ip", 0, 0, 64, check_ip, "IP address", "dhcp, or a static address with its prefix (10.0.0.5/24)",
		    "Network", NULL },
	[FB_GATEWAY] = { "gateway", 0, 0, 64, check_address, "Gateway", "The default gateway (static addresses)",
			 "Network", NULL },
	[FB_DNS] = { "dns", 0, 0, 512, check_dns, "DNS servers", "Comma-separated DNS server addresses", "Network",
		     NULL },
	[FB_NTP] = { "ntp", 0, 0, 1024, check_ntp, "NTP servers", "Comma-separated NTP servers", "Network", NULL },
	[FB_ADMIN_PASSWORD] = { "admin_password", 1, 0, 1024, check_password, "Admin password",
				"The console's admin password (12 characters or more); empty: a one-time one", "Access",
				NULL },
	[FB_SSH_KEY] = { "ssh_key", 0, 0, 8192, check_ssh_key, "SSH public key", "An OpenSSH public key for root",
			 "Access", NULL },
	[FB_ROLE] = { "role", 0, 0, 16, check_role, "Cluster role", "leader, or member of a leader's cluster",
		      "Cluster", "leader,member" },
	[FB_JOIN_URL] = { "join_url", 0, 0, 512, check_url, "Leader URL", "A member's leader: https://HOST", "Cluster",
			  NULL },
	[FB_JOIN_TOKEN] = { "join_token", 1, 0, 64, check_join_token, "Join token", "The leader's one-time join token",
			    "Cluster", NULL },
	[FB_JOIN_PIN] = { "join_pin", 0, 0, 64, check_pin, "Leader key pin", "sha256//... as the join token showed",
			  "Cluster", NULL },
	[FB_TLS_CERT] = { "tls_cert", 0, 1, 65536, check_cert, "TLS certificate",
			  "The console's certificate chain, PEM", "Access", NULL },
	[FB_TLS_KEY] = { "tls_key", 1, 1, 65536, check_key, "TLS private key", "Its private key, PEM, unencrypted",
			 "Access", NULL },
	[FB_MODELS] = { "models", 0, 0, 4096, check_models, "Models", "Comma-separated .gguf paths on an attached disk",
			"Models", NULL },
};

int
fb_key_find(const char *name)
{
	for (int k = 0; k < FB_NKEYS; k++)
		if (strcmp(fb_keys[k].name, name) == 0)
			return k;
	return -1;
}

void
fb_config_init(struct fb_config *c)
{
	memset(c, 0, sizeof(*c));
	c->warnings = cJSON_CreateArray();
}

void
fb_config_free(struct fb_config *c)
{
	for (int k = 0; k < FB_NKEYS; k++)
		if (c->v[k].value != NULL) {
			sodium_memzero(c->v[k].value, strlen(c->v[k].value));
			free(c->v[k].value);
		}
	cJSON_Delete(c->warnings);
	memset(c, 0, sizeof(*c));
}

void
fb_config_set(struct fb_config *c, enum fb_key key, const char *value, const char *source)
{
	struct fb_value *v = &c->v[key];
	const struct fb_key_info *k = &fb_keys[key];

	if (v->value != NULL) {
		sodium_memzero(v->value, strlen(v->value));
		free(v->value);
	}
	v->value = strdup(value);
	snprintf(v->source, sizeof(v->source), "%s", source);
	v->problem[0] = '\0';
	if (v->value == NULL)
		snprintf(v->problem, sizeof(v->problem), "out of memory");
	else if (strlen(value) > k->max_len)
		snprintf(v->problem, sizeof(v->problem), "longer than %zu characters", k->max_len);
	else if (k->check(value, v->problem, sizeof(v->problem)) < 0 && v->problem[0] == '\0')
		snprintf(v->problem, sizeof(v->problem), "not a valid %s", k->name);
}

void
fb_warn(struct fb_config *c, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	cJSON_AddItemToArray(c->warnings, cJSON_CreateString(msg));
}

const char *
fb_good(const struct fb_config *c, enum fb_key key)
{
	return c->v[key].value != NULL && c->v[key].problem[0] == '\0' ? c->v[key].value : NULL;
}

void
fb_config_merge(struct fb_config *dst, struct fb_config *src, int values)
{
	cJSON *w;

	for (int k = 0; values && k < FB_NKEYS; k++) {
		if (src->v[k].value == NULL)
			continue;
		if (dst->v[k].value != NULL) {
			sodium_memzero(dst->v[k].value, strlen(dst->v[k].value));
			free(dst->v[k].value);
		}
		dst->v[k] = src->v[k];
		memset(&src->v[k], 0, sizeof(src->v[k]));
	}
	while ((w = cJSON_DetachItemFromArray(src->warnings, 0)) != NULL)
		cJSON_AddItemToArray(dst->warnings, w);
}
