/* TLS material for the console: a generated self-signed pair, and a check
 * that an uploaded pair loads before it replaces the one in use. */
#ifndef PRIVAI_ADMIN_TLS_H
#define PRIVAI_ADMIN_TLS_H

#include <stddef.h>

/* Write a new key (0600) and self-signed certificate for hostname. */
int tls_selfsigned(const char *cert_path, const char *key_path, const char *hostname, char *err);
/* PRIVAI_OK when the PEM certificate and key load together. */
int tls_check_pair(const char *cert_pem, const char *key_pem, char *err);
/* The certificate's public-key pin, "sha256//BASE64" of its
 * SubjectPublicKeyInfo: what a joining node checks the console by. */
int tls_public_key_pin(const char *cert_pem, char *out, size_t size, char *err);

#endif
