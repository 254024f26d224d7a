/* Checking a certificate an admin uploads, and replacing the pair on disk:
 * chains made here with GnuTLS (a CA and a server certificate it signed,
 * expired, not yet valid, in the wrong order, too long, with someone
 * else's key or an encrypted one), then the files, and a replacement a
 * crash cut between its two renames. */
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "testlib.h"
#include "status.h"
#include "http/tls.h"
#include "http/tls_live.h"

struct made {
	gnutls_x509_crt_t crt;
	gnutls_x509_privkey_t key;
	char *crt_pem, *key_pem;
};

static char *
export_pem(gnutls_x509_crt_t crt, gnutls_x509_privkey_t key, const char *password)
{
	gnutls_datum_t d = { NULL, 0 };
	int g = crt != NULL        ? gnutls_x509_crt_export2(crt, GNUTLS_X509_FMT_PEM, &d)
		: password != NULL ? gnutls_x509_privkey_export2_pkcs8(key, GNUTLS_X509_FMT_PEM, password,
								       GNUTLS_PKCS_PBES2_AES_256, &d)
				   : gnutls_x509_privkey_export2(key, GNUTLS_X509_FMT_PEM, &d);
	char *s = g < 0 ? NULL : strndup((const char *)d.data, d.size);
	gnutls_free(d.data);
	return s;
}

/* A certificate for cn valid from..until, signed by issuer (NULL: itself). */
static void
make(struct made *m, const struct made *issuer, const char *cn, time_t from, time_t until, int ca)
{
	static unsigned char serial = 1;
	unsigned char sn[8] = { 1, 2, 3, 4, 5, 6, 7, serial++ };

	gnutls_x509_privkey_init(&m->key);
	gnutls_x509_privkey_generate(m->key, GNUTLS_PK_ECDSA, GNUTLS_CURVE_TO_BITS(GNUTLS_ECC_CURVE_SECP256R1), 0);
	gnutls_x509_crt_init(&m->crt);
	gnutls_x509_crt_set_version(m->crt, 3);
	gnutls_x509_crt_set_serial(m->crt, sn, sizeof(sn));
	gnutls_x509_crt_set_activation_time(m->crt, from);
	gnutls_x509_crt_set_expiration_time(m->crt, until);
	gnutls_x509_crt_set_dn_by_oid(m->crt, GNUTLS_OID_X520_COMMON_NAME, 0, cn, (unsigned)strlen(cn));
	gnutls_x509_crt_set_key(m->crt, m->key);
	gnutls_x509_crt_set_basic_constraints(m->crt, ca, -1);
	gnutls_x509_crt_set_key_usage(m->crt, ca ? GNUTLS_KEY_KEY_CERT_SIGN : GNUTLS_KEY_DIGITAL_SIGNATURE);
	if (issuer != NULL)
		gnutls_x509_crt_sign2(m->crt, issuer->crt, issuer->key, GNUTLS_DIG_SHA256, 0);
	else
		gnutls_x509_crt_sign2(m->crt, m->crt, m->key, GNUTLS_DIG_SHA256, 0);
	m->crt_pem = export_pem(m->crt, NULL, NULL);
	m->key_pem = export_pem(NULL, m->key, NULL);
}

static void
unmake(struct made *m)
{
	gnutls_x509_crt_deinit(m->crt);
	gnutls_x509_privkey_deinit(m->key);
	free(m->crt_pem);
	free(m->key_pem);
}

static char *
cat(const char *a, const char *b)
{
	size_t na = strlen(a), nb = strlen(b);
	char *s = malloc(na + nb + 1);
	memcpy(s, a, na);
	memcpy(s + na, b, nb + 1);
	return s;
}

static char *
slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	static char buf[16384];
	size_t n = f != NULL ? fread(buf, 1, sizeof(buf) - 1, f) : 0;

	if (f != NULL)
		fclose(f);
	buf[n] = '\0';
	return buf;
}

/* dir/name's contents, or write text as them */
static char *
slurp_in(const char *dir, const char *name)
{
	char path[256];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return slurp(path);
}

static void
put(const char *dir, const char *name, const char *text)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if ((f = fopen(path, "w")) != NULL) {
		fputs(text, f);
		fclose(f);
	}
}

static void
test_checks(void)
{
	time_t now = time(NULL);
	struct made ca, leaf, other, old, early;
	struct tls_cert_info info;
	const char *field;
	char err[APP_ERR_LEN];

	make(&ca, NULL, "Test CA", now - 86400, now + 30 * 86400, 1);
	make(&leaf, &ca, "console.example", now - 3600, now + 7 * 86400, 0);
	make(&other, NULL, "someone else", now - 3600, now + 86400, 0);
	make(&old, &ca, "expired.example", now - 10 * 86400, now - 86400, 0);
	make(&early, &ca, "early.example", now + 86400, now + 10 * 86400, 0);
	char *chain = cat(leaf.crt_pem, ca.crt_pem), *backwards = cat(ca.crt_pem, leaf.crt_pem);

	int rc = tls_check_upload(chain, leaf.key_pem, now, &info, &field, err);
	CHECK(rc == APP_OK, "server certificate + CA with its key: %s", err);
	CHECK(strcmp(info.subject, "CN=console.example") == 0 && strcmp(info.issuer, "CN=Test CA") == 0 &&
		      info.chain_length == 2 && !info.self_signed && strncmp(info.pin, "sha256//", 8) == 0,
	      "described: %s by %s, %d long, pin %s", info.subject, info.issuer, info.chain_length, info.pin);
	CHECK(info.not_after == (int64_t)(now + 7 * 86400), "not_after %lld", (long long)info.not_after);
	CHECK(tls_check_upload(leaf.crt_pem, leaf.key_pem, now, &info, &field, err) == APP_OK,
	      "the server certificate alone: %s", err);
	CHECK(tls_check_upload(other.crt_pem, other.key_pem, now, &info, &field, err) == APP_OK && info.self_signed,
	      "a self-signed one is fine, and said to be");

	rc = tls_check_upload(backwards, leaf.key_pem, now, &info, &field, err);
	CHECK(rc != APP_OK && strcmp(field, "certificate") == 0 && strstr(err, "out of order"), "CA first: %s", err);
	rc = tls_check_upload(chain, other.key_pem, now, &info, &field, err);
	CHECK(rc != APP_OK && strcmp(field, "key") == 0 && strstr(err, "does not belong"), "another key: %s", err);
	rc = tls_check_upload(chain, ca.key_pem, now, &info, &field, err);
	CHECK(rc != APP_OK && strcmp(field, "key") == 0, "the CA's key for the server certificate: %s", err);
	rc = tls_check_upload(old.crt_pem, old.key_pem, now, &info, &field, err);
	CHECK(rc != APP_OK && strcmp(field, "certificate") == 0 && strstr(err, "expired"), "expired: %s", err);
	rc = tls_check_upload(early.crt_pem, early.key_pem, now, &info, &field, err);
	CHECK(rc != APP_OK && strstr(err, "not valid before"), "not yet valid: %s", err);
	rc = tls_check_upload("hello", leaf.key_pem, now, &info, &field, err);
	CHECK(rc != APP_OK && strcmp(field, "certificate") == 0 && strstr(err, "not PEM"), "not PEM: %s", err);
	rc = tls_check_upload("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", leaf.key_pem, now,
			      &info, &field, err);
	CHECK(rc != APP_OK && strstr(err, "cannot be read"), "garbage inside PEM armour: %s", err);
	rc = tls_check_upload(chain, "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", now, &info,
			      &field, err);
	CHECK(rc != APP_OK && strcmp(field, "key") == 0, "garbage key: %s", err);
	char *encrypted = export_pem(NULL, leaf.key, "secret");
	rc = tls_check_upload(chain, encrypted, now, &info, &field, err);
	CHECK(rc != APP_OK && strcmp(field, "key") == 0 && strstr(err, "encrypted"), "encrypted key: %s", err);
	free(encrypted);

	/* 17 certificates: each of the CA, the first the leaf's own */
	char *many = strdup(leaf.crt_pem);
	for (int i = 0; i < TLS_MAX_CHAIN; i++) {
		char *more = cat(many, ca.crt_pem);
		free(many);
		many = more;
	}
	rc = tls_check_upload(many, leaf.key_pem, now, &info, &field, err);
	CHECK(rc != APP_OK && strcmp(field, "certificate") == 0 && strstr(err, "at most 16"),
	      "a 17-certificate chain: %s", err);
	free(many);

	CHECK(tls_describe(chain, &info, err) == APP_OK && info.chain_length == 2, "described without the key");
	CHECK(tls_live_init(chain, leaf.key_pem, err) == APP_OK, "served: %s", err);
	CHECK(tls_live_replace(other.crt_pem, other.key_pem, err) == APP_OK, "replaced while serving: %s", err);
	tls_live_free();

	free(chain);
	free(backwards);
	unmake(&ca);
	unmake(&leaf);
	unmake(&other);
	unmake(&old);
	unmake(&early);
}

static void
test_store(void)
{
	char dir[] = "/tmp/privai-tls-XXXXXX", path[256], err[APP_ERR_LEN];
	struct stat sb;

	CHECK(mkdtemp(dir) != NULL, "temporary directory");
	snprintf(path, sizeof(path), "%s/cert.pem", dir);
	CHECK(tls_store_replace(dir, "CERT-1\n", "KEY-1\n", err) == APP_OK, "first pair: %s", err);
	CHECK(tls_store_replace(dir, "CERT-2\n", "KEY-2\n", err) == APP_OK, "replaced: %s", err);
	CHECK(strcmp(slurp(path), "CERT-2\n") == 0, "cert.pem replaced");
	snprintf(path, sizeof(path), "%s/key.pem", dir);
	CHECK(strcmp(slurp(path), "KEY-2\n") == 0 && stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0600,
	      "key.pem replaced, mode 0600");
	snprintf(path, sizeof(path), "%s/cert.pem.new", dir);
	CHECK(access(path, F_OK) != 0, "no .new file left");

	/* a crash after both .new files were written, before any rename: the old pair stands */
	put(dir, "cert.pem.new", "CERT-3\n");
	put(dir, "key.pem.new", "KEY-3\n");
	tls_store_recover(dir);
	CHECK(strcmp(slurp_in(dir, "cert.pem"), "CERT-2\n") == 0,
	      "crash before the renames: the old certificate stays");
	CHECK(strcmp(slurp_in(dir, "key.pem"), "KEY-2\n") == 0, "and the old key");
	snprintf(path, sizeof(path), "%s/cert.pem.new", dir);
	CHECK(access(path, F_OK) != 0, "the unused new certificate is removed");

	/* a crash between the renames: the key is new, its certificate follows */
	put(dir, "key.pem", "KEY-4\n");
	put(dir, "cert.pem.new", "CERT-4\n");
	tls_store_recover(dir);
	CHECK(strcmp(slurp_in(dir, "cert.pem"), "CERT-4\n") == 0,
	      "crash between the renames: the new certificate joins its key");

	CHECK(tls_store_replace("/nonexistent/dir", "C", "K", err) != APP_OK && strstr(err, "/nonexistent/dir"),
	      "a directory that is not there: %s", err);
	snprintf(path, sizeof(path), "rm -rf %s", dir);
	CHECK(system(path) == 0, "cleaned up");
}

int
main(void)
{
	gnutls_global_init();
	test_checks();
	test_store();
	gnutls_global_deinit();
	return test_summary();
}
