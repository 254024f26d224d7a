/*
 * /api/v1/system/tls: the console's certificate, and replacing it with the
 * site's own.  An upload is checked whole (tls_check_upload) before
 * anything is written; it is then stored beside the old pair, renamed
 * over it, and served from the next handshake (http/tls_live.h).  Joined nodes
 * pinned the console's public key when they joined, so a new key while
 * any is joined needs "force": they cannot reach this console again
 * until they join anew.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "admin.h"
#include "http/httpd.h"
#include "http/tls.h"
#include "http/tls_live.h"
#include "cluster/nodes.h"

static cJSON *
info_json(const struct admin *a, const struct tls_cert_info *info)
{
	cJSON *o = cJSON_CreateObject();

	cJSON_AddBoolToObject(o, "tls", 1);
	cJSON_AddBoolToObject(o, "managed", a->tls_dir[0] != '\0');
	cJSON_AddStringToObject(o, "subject", info->subject);
	cJSON_AddStringToObject(o, "issuer", info->issuer);
	cJSON_AddNumberToObject(o, "not_before", (double)info->not_before);
	cJSON_AddNumberToObject(o, "not_after", (double)info->not_after);
	cJSON_AddNumberToObject(o, "chain_length", info->chain_length);
	cJSON_AddBoolToObject(o, "self_signed", info->self_signed);
	cJSON_AddStringToObject(o, "pin", info->pin);
	return o;
}

static void
h_tls_get(struct req *r)
{
	struct tls_cert_info info;
	char err[APP_ERR_LEN];

	if (!r->a->tls) {
		cJSON *o = cJSON_CreateObject();
		cJSON_AddBoolToObject(o, "tls", 0);
		reply_json(r, 200, o);
		return;
	}
	if (tls_describe(r->a->tls_cert_pem, &info, err) != APP_OK) {
		reply_error(r, 500, "internal", NULL, "%s", err);
		return;
	}
	reply_json(r, 200, info_json(r->a, &info));
}

static void
replace(struct req *r, const char *cert, const char *key, int force)
{
	struct admin *a = r->a;
	struct tls_cert_info info;
	const char *field;
	char err[APP_ERR_LEN];
	int64_t joined;

	if (tls_check_upload(cert, key, r->now, &info, &field, err) != APP_OK) {
		reply_error(r, 422, "invalid_field", field, "%s", err);
		return;
	}
	if (strcmp(info.pin, a->tls_pin) != 0 && !force && (joined = nodes_joined_count(a->db)) != 0) {
		reply_error(r, 409, "pin_in_use", "key",
			    "%lld joined node(s) pinned this console's current key and could not reach it with a new "
			    "one; renew the certificate with the same key, or send \"force\": true and join them again",
			    (long long)joined);
		return;
	}
	char *cert_copy = strdup(cert);
	if (cert_copy == NULL) {
		reply_error(r, 500, "internal", NULL, "out of memory");
		return;
	}
	if (tls_store_replace(a->tls_dir, cert, key, err) != APP_OK || tls_live_replace(cert, key, err) != APP_OK) {
		free(cert_copy);
		reply_error(r, 500, "internal", NULL, "%s", err);
		return;
	}
	free(a->tls_cert_pem);
	a->tls_cert_pem = cert_copy;
	snprintf(a->tls_pin, sizeof(a->tls_pin), "%s", info.pin);
	cJSON *d = cJSON_CreateObject();
	cJSON_AddStringToObject(d, "subject", info.subject);
	cJSON_AddStringToObject(d, "issuer", info.issuer);
	cJSON_AddNumberToObject(d, "not_after", (double)info.not_after);
	cJSON_AddStringToObject(d, "pin", info.pin);
	req_audit(r, "tls.replace", info.subject, "ok", d);
	reply_json(r, 200, info_json(a, &info));
}

static void
h_tls_put(struct req *r)
{
	static const char *const known[] = { "certificate", "key", "force", NULL };
	const char *cert, *key;
	int force;
	cJSON *j;

	if (!r->a->tls) {
		reply_error(r, 409, "tls_off", NULL,
			    "this console serves plain HTTP on loopback (--dev); it has no "
			    "certificate to replace");
		return;
	}
	if (r->a->tls_dir[0] == '\0') {
		reply_error(r, 409, "tls_external", NULL,
			    "this console's certificate comes from --tls-cert %s; replace "
			    "that file and restart privai-admin",
			    r->a->cfg.tls_cert);
		return;
	}
	if ((j = body_object(r)) == NULL)
		return;
	if (fields_known(r, j, known) == 0 &&
	    (cert = field_text(r, j, "certificate", 1, TLS_MAX_CERT_PEM, NULL)) != NULL &&
	    (key = field_text(r, j, "key", 1, TLS_MAX_KEY_PEM, NULL)) != NULL &&
	    field_bool(r, j, "force", 0, &force) == 0)
		replace(r, cert, key, force);
	body_wipe(j); /* the private key */
}

const struct route api_tls_routes[] = {
	{ "GET", "/api/v1/system/tls", ROLE_VIEWER, 0, h_tls_get, NULL, NULL },
	{ "PUT", "/api/v1/system/tls", ROLE_ADMIN, 0, h_tls_put, NULL, "tls.replace" },
	{ NULL, NULL, 0, 0, NULL, NULL, NULL },
};
