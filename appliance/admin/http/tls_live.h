/*
 * The certificate the console serves, replaceable while it runs: the
 * HTTPS daemon asks for it at each handshake (MHD's certificate callback),
 * so an uploaded certificate is used from the next connection on and no
 * connection is cut.  Replaced pairs are kept until the process ends, as
 * a handshake in progress may still hold one.
 *
 * On disk the managed pair is STATE/tls/{cert,key}.pem.  A replacement is
 * written beside them as *.new, synced, and renamed key first; a crash
 * between the two renames is finished at the next start (the new key with
 * the old certificate never serves).
 */
#ifndef PRIVAI_ADMIN_TLS_LIVE_H
#define PRIVAI_ADMIN_TLS_LIVE_H

#include <gnutls/abstract.h>
#include <gnutls/gnutls.h>

/* Load the pair to serve first.  One per process: GnuTLS's callback has
 * no user pointer. */
int tls_live_init(const char *cert_pem, const char *key_pem, char *err);
/* Serve this pair from the next handshake on. */
int tls_live_replace(const char *cert_pem, const char *key_pem, char *err);
void tls_live_free(void);
/* gnutls_certificate_retrieve_function2, for MHD_OPTION_HTTPS_CERT_CALLBACK. */
int tls_live_retrieve(gnutls_session_t session, const gnutls_datum_t *req_ca_dn, int nreqs,
		      const gnutls_pk_algorithm_t *pk_algos, int pk_algos_length, gnutls_pcert_st **pcert,
		      unsigned int *pcert_length, gnutls_privkey_t *pkey);

/* Write cert_pem and key_pem over the pair in dir (files cert.pem and
 * key.pem), as described above. */
int tls_store_replace(const char *dir, const char *cert_pem, const char *key_pem, char *err);
/* At start: finish a replacement a crash interrupted. */
void tls_store_recover(const char *dir);

#endif
