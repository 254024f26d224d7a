/*
 * A self-signed certificate for first boot (GnuTLS): ECDSA P-256, valid
 * ten years, for the host name and 127.0.0.1, so the console is HTTPS
 * from the start; an admin replaces it with the site's own.
 */
#include <gnutls/gnutls.h>
#include <gnutls/abstract.h>
#include <gnutls/crypto.h>
#include <gnutls/x509.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "status.h"
#include "http/tls.h"

static int
write_file(const char *path, const gnutls_datum_t *d, mode_t mode, char *err)
{
	char tmp[4200];

	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	if (fd < 0)
		return app_fail(err, APP_EIO, "cannot write %s", tmp);
	int ok = write(fd, d->data, d->size) == (ssize_t)d->size && fsync(fd) == 0;
	ok &= close(fd) == 0;
	if (!ok || rename(tmp, path) != 0) {
		unlink(tmp);
		return app_fail(err, APP_EIO, "cannot write %s", path);
	}
	return APP_OK;
}

int
tls_selfsigned(const char *cert_path, const char *key_path, const char *hostname, char *err)
{
	gnutls_x509_privkey_t key = NULL;
	gnutls_x509_crt_t crt = NULL;
	gnutls_datum_t kpem = { NULL, 0 }, cpem = { NULL, 0 };
	unsigned char serial[16];
	static const unsigned char loopback[4] = { 127, 0, 0, 1 };
	int rc = APP_EIO, g;
	time_t now = time(NULL);

	if ((g = gnutls_x509_privkey_init(&key)) < 0 ||
	    (g = gnutls_x509_privkey_generate(key, GNUTLS_PK_ECDSA, GNUTLS_CURVE_TO_BITS(GNUTLS_ECC_CURVE_SECP256R1),
					      0)) < 0 ||
	    (g = gnutls_x509_crt_init(&crt)) < 0 || (g = gnutls_x509_crt_set_version(crt, 3)) < 0 ||
	    (g = gnutls_rnd(GNUTLS_RND_NONCE, serial, sizeof(serial))) < 0)
		goto out;
	serial[0] &= 0x7f; /* a positive serial number */
	if ((g = gnutls_x509_crt_set_serial(crt, serial, sizeof(serial))) < 0 ||
	    (g = gnutls_x509_crt_set_activation_time(crt, now - 3600)) < 0 ||
	    (g = gnutls_x509_crt_set_expiration_time(crt, now + 10L * 365 * 86400)) < 0 ||
	    (g = gnutls_x509_crt_set_dn_by_oid(crt, GNUTLS_OID_X520_COMMON_NAME, 0, hostname,
					       (unsigned)strlen(hostname))) < 0 ||
	    (g = gnutls_x509_crt_set_dn_by_oid(crt, GNUTLS_OID_X520_ORGANIZATION_NAME, 0, "privai appliance", 16)) <
		    0 ||
	    (g = gnutls_x509_crt_set_subject_alt_name(crt, GNUTLS_SAN_DNSNAME, hostname, (unsigned)strlen(hostname),
						      GNUTLS_FSAN_SET)) < 0 ||
	    (g = gnutls_x509_crt_set_subject_alt_name(crt, GNUTLS_SAN_IPADDRESS, loopback, 4, GNUTLS_FSAN_APPEND)) <
		    0 ||
	    (g = gnutls_x509_crt_set_key(crt, key)) < 0 ||
	    (g = gnutls_x509_crt_set_basic_constraints(crt, 0, -1)) < 0 ||
	    (g = gnutls_x509_crt_set_key_usage(crt, GNUTLS_KEY_DIGITAL_SIGNATURE)) < 0 ||
	    (g = gnutls_x509_crt_set_key_purpose_oid(crt, GNUTLS_KP_TLS_WWW_SERVER, 0)) < 0 ||
	    (g = gnutls_x509_crt_sign2(crt, crt, key, GNUTLS_DIG_SHA256, 0)) < 0 ||
	    (g = gnutls_x509_privkey_export2(key, GNUTLS_X509_FMT_PEM, &kpem)) < 0 ||
	    (g = gnutls_x509_crt_export2(crt, GNUTLS_X509_FMT_PEM, &cpem)) < 0)
		goto out;
	if ((rc = write_file(key_path, &kpem, 0600, err)) == APP_OK)
		rc = write_file(cert_path, &cpem, 0644, err);
	g = 0;
out:
	if (g < 0)
		rc = app_fail(err, APP_EIO, "generating a certificate: %s", gnutls_strerror(g));
	gnutls_free(kpem.data);
	gnutls_free(cpem.data);
	if (crt != NULL)
		gnutls_x509_crt_deinit(crt);
	if (key != NULL)
		gnutls_x509_privkey_deinit(key);
	return rc;
}

int
tls_check_pair(const char *cert_pem, const char *key_pem, char *err)
{
	gnutls_certificate_credentials_t cred;
	gnutls_datum_t c = { (unsigned char *)(uintptr_t)cert_pem, (unsigned)strlen(cert_pem) };
	gnutls_datum_t k = { (unsigned char *)(uintptr_t)key_pem, (unsigned)strlen(key_pem) };
	int g;

	if ((g = gnutls_certificate_allocate_credentials(&cred)) < 0)
		return app_fail(err, APP_ENOMEM, "%s", gnutls_strerror(g));
	g = gnutls_certificate_set_x509_key_mem(cred, &c, &k, GNUTLS_X509_FMT_PEM);
	gnutls_certificate_free_credentials(cred);
	if (g < 0)
		return app_fail(err, APP_EINVAL, "the certificate and key do not form a usable pair: %s",
				gnutls_strerror(g));
	return APP_OK;
}

int
tls_public_key_pin(const char *cert_pem, char *out, size_t size, char *err)
{
	gnutls_x509_crt_t crt = NULL;
	gnutls_pubkey_t key = NULL;
	gnutls_datum_t in = { (unsigned char *)cert_pem, (unsigned)strlen(cert_pem) }, der = { NULL, 0 };
	unsigned char h[32];
	int rc = APP_EFORMAT;

	if (gnutls_x509_crt_init(&crt) < 0)
		return app_fail(err, APP_ENOMEM, "out of memory");
	if (gnutls_pubkey_init(&key) < 0) {
		gnutls_x509_crt_deinit(crt);
		return app_fail(err, APP_ENOMEM, "out of memory");
	}
	if (gnutls_x509_crt_import(crt, &in, GNUTLS_X509_FMT_PEM) < 0 || gnutls_pubkey_import_x509(key, crt, 0) < 0 ||
	    gnutls_pubkey_export2(key, GNUTLS_X509_FMT_DER, &der) < 0 ||
	    gnutls_hash_fast(GNUTLS_DIG_SHA256, der.data, der.size, h) < 0) {
		app_fail(err, APP_EFORMAT, "cannot read the certificate's public key");
		goto out;
	}
	/* "sha256//" + base64: the form libcurl's CURLOPT_PINNEDPUBLICKEY takes */
	char enc[48];
	sodium_bin2base64(enc, sizeof(enc), h, sizeof(h), sodium_base64_VARIANT_ORIGINAL);
	snprintf(out, size, "sha256//%s", enc);
	rc = APP_OK;
out:
	gnutls_free(der.data);
	gnutls_pubkey_deinit(key);
	gnutls_x509_crt_deinit(crt);
	return rc;
}

static void
crt_dn(gnutls_x509_crt_t crt, int issuer, char *out, size_t size)
{
	gnutls_datum_t dn = { NULL, 0 };
	int g = issuer ? gnutls_x509_crt_get_issuer_dn3(crt, &dn, 0) : gnutls_x509_crt_get_dn3(crt, &dn, 0);

	snprintf(out, size, "%.*s", g < 0 ? 0 : (int)dn.size, g < 0 ? "" : (const char *)dn.data);
	gnutls_free(dn.data);
}

static int
import_chain(const char *cert_pem, gnutls_x509_crt_t **list, unsigned *n, char *err)
{
	gnutls_datum_t in = { (unsigned char *)(uintptr_t)cert_pem, (unsigned)strlen(cert_pem) };
	int g;

	if (strstr(cert_pem, "-----BEGIN CERTIFICATE-----") == NULL)
		return app_fail(err, APP_EFORMAT, "the certificate is not PEM (no BEGIN CERTIFICATE line)");
	/* the server's certificate first, then each one's issuer: what a client needs, in the order it needs it */
	g = gnutls_x509_crt_list_import2(list, n, &in, GNUTLS_X509_FMT_PEM,
					 GNUTLS_X509_CRT_LIST_FAIL_IF_UNSORTED |
						 GNUTLS_X509_CRT_LIST_IMPORT_FAIL_IF_EXCEED);
	if (g == GNUTLS_E_CERTIFICATE_LIST_UNSORTED)
		return app_fail(err, APP_EFORMAT,
				"the certificates are out of order: put the server's "
				"certificate first, then each certificate's issuer");
	if (g < 0)
		return app_fail(err, APP_EFORMAT, "the certificate cannot be read: %s", gnutls_strerror(g));
	if (*n > TLS_MAX_CHAIN) {
		for (unsigned i = 0; i < *n; i++)
			gnutls_x509_crt_deinit((*list)[i]);
		gnutls_free(*list);
		return app_fail(err, APP_ERANGE, "the chain has %u certificates; at most %d", *n, TLS_MAX_CHAIN);
	}
	return APP_OK;
}

static void
free_chain(gnutls_x509_crt_t *list, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		gnutls_x509_crt_deinit(list[i]);
	gnutls_free(list);
}

static void
describe(gnutls_x509_crt_t *list, unsigned n, struct tls_cert_info *info)
{
	memset(info, 0, sizeof(*info));
	crt_dn(list[0], 0, info->subject, sizeof(info->subject));
	crt_dn(list[0], 1, info->issuer, sizeof(info->issuer));
	info->not_before = (int64_t)gnutls_x509_crt_get_activation_time(list[0]);
	info->not_after = (int64_t)gnutls_x509_crt_get_expiration_time(list[0]);
	info->chain_length = (int)n;
	info->self_signed = gnutls_x509_crt_check_issuer(list[0], list[0]) != 0;
}

int
tls_describe(const char *cert_pem, struct tls_cert_info *info, char *err)
{
	gnutls_x509_crt_t *list = NULL;
	unsigned n = 0;
	int rc = import_chain(cert_pem, &list, &n, err);

	if (rc != APP_OK)
		return rc;
	describe(list, n, info);
	free_chain(list, n);
	return tls_public_key_pin(cert_pem, info->pin, sizeof(info->pin), err);
}

/* The key's ID (a hash of its public part) against the certificate's. */
static int
key_matches(gnutls_x509_crt_t crt, gnutls_x509_privkey_t key)
{
	unsigned char a[64], b[64];
	size_t na = sizeof(a), nb = sizeof(b);

	return gnutls_x509_crt_get_key_id(crt, 0, a, &na) >= 0 && gnutls_x509_privkey_get_key_id(key, 0, b, &nb) >= 0 &&
	       na == nb && memcmp(a, b, na) == 0;
}

int
tls_check_upload(const char *cert_pem, const char *key_pem, int64_t now, struct tls_cert_info *info, const char **field,
		 char *err)
{
	gnutls_x509_crt_t *list = NULL;
	gnutls_x509_privkey_t key = NULL;
	gnutls_datum_t kin = { (unsigned char *)(uintptr_t)key_pem, (unsigned)strlen(key_pem) };
	unsigned n = 0;
	int g, rc;

	*field = "certificate";
	if ((rc = import_chain(cert_pem, &list, &n, err)) != APP_OK)
		return rc;
	describe(list, n, info);
	if (now < info->not_before) {
		rc = app_fail(err, APP_EINVAL, "the certificate is not valid before %lld (Unix time); now is %lld",
			      (long long)info->not_before, (long long)now);
		goto out;
	}
	if (now >= info->not_after) {
		rc = app_fail(err, APP_EINVAL, "the certificate expired at %lld (Unix time)",
			      (long long)info->not_after);
		goto out;
	}
	*field = "key";
	if (strstr(key_pem, "ENCRYPTED") != NULL) {
		rc = app_fail(err, APP_EINVAL,
			      "the key is encrypted; upload it without a passphrase "
			      "(it is stored readable by privai-admin only)");
		goto out;
	}
	if ((g = gnutls_x509_privkey_init(&key)) < 0 ||
	    (g = gnutls_x509_privkey_import2(key, &kin, GNUTLS_X509_FMT_PEM, NULL, GNUTLS_PKCS_PLAIN)) < 0) {
		rc = app_fail(err, APP_EFORMAT, "the key cannot be read: %s", gnutls_strerror(g));
		goto out;
	}
	if (!key_matches(list[0], key)) {
		rc = app_fail(err, APP_EINVAL, "the key does not belong to the first certificate (%s)", info->subject);
		goto out;
	}
	*field = "certificate";
	if ((rc = tls_check_pair(cert_pem, key_pem, err)) != APP_OK ||
	    (rc = tls_public_key_pin(cert_pem, info->pin, sizeof(info->pin), err)) != APP_OK)
		goto out;
	rc = APP_OK;
out:
	if (key != NULL)
		gnutls_x509_privkey_deinit(key);
	free_chain(list, n);
	return rc;
}
