/* privai-admin reset-password: a lost password replaced from the
 * appliance's own console (auth/reset_password.c). */
#ifndef PRIVAI_ADMIN_RESET_PASSWORD_H
#define PRIVAI_ADMIN_RESET_PASSWORD_H

#include <stddef.h>
#include <stdint.h>

struct reset_result {
	int sessions_ended;
	int tokens_revoked;
};

/* Give user `name` of the store at db_path a new one-time password
 * (written to ret_password, which holds size >= 28 bytes), lift its
 * lockout, end its sessions, revoke its API tokens and audit it as done
 * by `actor`; all in one transaction.  APP_ENOTFOUND for an unknown
 * user; APP_EIO with the database's message otherwise. */
int admin_reset_password(const char *db_path, const char *name, int64_t now, const char *actor, char *ret_password,
			 size_t size, struct reset_result *ret, char *err);

#endif
