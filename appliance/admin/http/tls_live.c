/* The console's certificate, swapped at run time, and its files. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "status.h"
#include "strfmt.h"
#include "http/tls.h"
#include "http/tls_live.h"

struct pair {
	gnutls_pcert_st pcerts[TLS_MAX_CHAIN];
	unsigned n;
	gnutls_privkey_t key;
	struct pair *older;
};

static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static struct pair *live; /* the newest; older ones hang off it */

static void
pair_free(struct pair *p)
{
	for (unsigned i = 0; i < p->n; i++)
		gnutls_pcert_deinit(&p->pcerts[i]);
	if (p->key != NULL)
		gnutls_privkey_deinit(p->key);
	free(p);
}

static int
pair_load(const char *cert_pem, const char *key_pem, struct pair **ret, char *err)
{
	gnutls_datum_t c = { (unsigned char *)(uintptr_t)cert_pem, (unsigned)strlen(cert_pem) };
	gnutls_datum_t k = { (unsigned char *)(uintptr_t)key_pem, (unsigned)strlen(key_pem) };
	struct pair *p = calloc(1, sizeof(*p));
	int g;

	if (p == NULL)
		return app_fail(err, APP_ENOMEM, "out of memory");
	p->n = TLS_MAX_CHAIN;
	if ((g = gnutls_pcert_list_import_x509_raw(p->pcerts, &p->n, &c, GNUTLS_X509_FMT_PEM, 0)) < 0) {
		p->n = 0;
		pair_free(p);
		return app_fail(err, APP_EFORMAT, "the certificate cannot be loaded: %s", gnutls_strerror(g));
	}
	if ((g = gnutls_privkey_init(&p->key)) < 0 ||
	    (g = gnutls_privkey_import_x509_raw(p->key, &k, GNUTLS_X509_FMT_PEM, NULL, 0)) < 0) {
		pair_free(p);
		return app_fail(err, APP_EFORMAT, "the key cannot be loaded: %s", gnutls_strerror(g));
	}
	*ret = p;
	return APP_OK;
}

int
tls_live_init(const char *cert_pem, const char *key_pem, char *err)
{
	tls_live_free();
	return tls_live_replace(cert_pem, key_pem, err);
}

int
tls_live_replace(const char *cert_pem, const char *key_pem, char *err)
{
	struct pair *p = NULL;
	int rc = pair_load(cert_pem, key_pem, &p, err);

	if (rc != APP_OK)
		return rc;
	pthread_mutex_lock(&live_mu);
	p->older = live;
	live = p;
	pthread_mutex_unlock(&live_mu);
	return APP_OK;
}

void
tls_live_free(void)
{
	pthread_mutex_lock(&live_mu);
	while (live != NULL) {
		struct pair *older = live->older;
		pair_free(live);
		live = older;
	}
	pthread_mutex_unlock(&live_mu);
}

int
tls_live_retrieve(gnutls_session_t session, const gnutls_datum_t *req_ca_dn, int nreqs,
		  const gnutls_pk_algorithm_t *pk_algos, int pk_algos_length, gnutls_pcert_st **pcert,
		  unsigned int *pcert_length, gnutls_privkey_t *pkey)
{
	(void)session, (void)req_ca_dn, (void)nreqs, (void)pk_algos, (void)pk_algos_length;
	pthread_mutex_lock(&live_mu);
	struct pair *p = live;
	pthread_mutex_unlock(&live_mu);
	if (p == NULL)
		return APP_EUNAVAIL;
	*pcert = p->pcerts;
	*pcert_length = p->n;
	*pkey = p->key;
	return 0;
}

static int
write_synced(const char *path, const char *text, char *err)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	size_t len = strlen(text);

	if (fd < 0)
		return app_fail(err, APP_EIO, "cannot write %s: %s", path, strerror(errno));
	int ok = write(fd, text, len) == (ssize_t)len && fsync(fd) == 0;
	ok &= close(fd) == 0;
	if (!ok) {
		unlink(path);
		return app_fail(err, APP_EIO, "cannot write %s: %s", path, strerror(errno));
	}
	return APP_OK;
}

static void
sync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd >= 0) {
		fsync(fd);
		close(fd);
	}
}

int
tls_store_replace(const char *dir, const char *cert_pem, const char *key_pem, char *err)
{
	char cert[PATH_MAX], key[PATH_MAX], cert_new[PATH_MAX + 8], key_new[PATH_MAX + 8];
	int rc;

	if (str_fmt(cert, sizeof(cert), "%s/cert.pem", dir) != APP_OK ||
	    str_fmt(key, sizeof(key), "%s/key.pem", dir) != APP_OK ||
	    str_fmt(cert_new, sizeof(cert_new), "%s.new", cert) != APP_OK ||
	    str_fmt(key_new, sizeof(key_new), "%s.new", key) != APP_OK)
		return app_fail(err, APP_ERANGE, "%s: the path is too long", dir);
	if ((rc = write_synced(cert_new, cert_pem, err)) != APP_OK)
		return rc;
	if ((rc = write_synced(key_new, key_pem, err)) != APP_OK) {
		unlink(cert_new);
		return rc;
	}
	sync_dir(dir);
	/* key first: cert.pem.new left behind means "finish me" (tls_store_recover) */
	if (rename(key_new, key) != 0) {
		rc = app_fail(err, APP_EIO, "cannot rename %s: %s", key_new, strerror(errno));
		unlink(key_new);
		unlink(cert_new);
		return rc;
	}
	if (rename(cert_new, cert) != 0)
		return app_fail(err, APP_EIO, "cannot rename %s: %s (the next start finishes it)", cert_new,
				strerror(errno));
	sync_dir(dir);
	return APP_OK;
}

void
tls_store_recover(const char *dir)
{
	char cert[PATH_MAX], key_new[PATH_MAX + 8], cert_new[PATH_MAX + 8];

	if (str_fmt(cert, sizeof(cert), "%s/cert.pem", dir) != APP_OK ||
	    str_fmt(cert_new, sizeof(cert_new), "%s/cert.pem.new", dir) != APP_OK ||
	    str_fmt(key_new, sizeof(key_new), "%s/key.pem.new", dir) != APP_OK)
		return;                   /* the store's paths fit (checked at start); nothing to recover here */
	if (access(key_new, F_OK) == 0) { /* the key was not renamed yet: the old pair stands */
		unlink(key_new);
		unlink(cert_new);
	} else if (access(cert_new, F_OK) == 0) { /* the key was: its certificate follows it */
		rename(cert_new, cert);
		sync_dir(dir);
	}
}
