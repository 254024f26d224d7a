/* TLS material for the console: a generated self-signed pair, and a check
 * that an uploaded pair loads before it replaces the one in use. */
#ifndef PRIVAI_ADMIN_TLS_H
#define PRIVAI_ADMIN_TLS_H

#include <stddef.h>
#include <stdint.h>

#define TLS_MAX_CHAIN 16
#define TLS_MAX_CERT_PEM (64 << 10)
#define TLS_MAX_KEY_PEM (16 << 10)

/* What the console's certificate says about itself. */
struct tls_cert_info {
	char subject[256], issuer[256];
	int64_t not_before, not_after; /* Unix seconds */
	int chain_length, self_signed;
	char pin[128]; /* sha256//BASE64 of its public key */
};

/* Write a new key (0600) and self-signed certificate for hostname. */
int tls_selfsigned(const char *cert_path, const char *key_path, const char *hostname, char *err);
/* APP_OK when the PEM certificate and key load together. */
int tls_check_pair(const char *cert_pem, const char *key_pem, char *err);
/* The certificate's public-key pin, "sha256//BASE64" of its
 * SubjectPublicKeyInfo: what a joining node checks the console by. */
int tls_public_key_pin(const char *cert_pem, char *out, size_t size, char *err);

/* Describe a PEM chain's first certificate. */
int tls_describe(const char *cert_pem, struct tls_cert_info *info, char *err);
/* Check a pair an admin uploads before it replaces the one in use: PEM,
 * at most TLS_MAX_CHAIN certificates, the server's first and each one's
 * issuer after it, valid at `now`, and an unencrypted key that belongs to
 * the first.  On failure *field is "certificate" or "key". */
int tls_check_upload(const char *cert_pem, const char *key_pem, int64_t now, struct tls_cert_info *info,
		     const char **field, char *err);

#endif
