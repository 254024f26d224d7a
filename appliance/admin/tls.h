/* TLS material for the console: a generated self-signed pair, and a check
 * that an uploaded pair loads before it replaces the one in use. */
#ifndef PRIVAI_ADMIN_TLS_H
#define PRIVAI_ADMIN_TLS_H

/* Write a new key (0600) and self-signed certificate for hostname. */
int tls_selfsigned(const char *cert_path, const char *key_path, const char *hostname, char *err);
/* PRIVAI_OK when the PEM certificate and key load together. */
int tls_check_pair(const char *cert_pem, const char *key_pem, char *err);

#endif
