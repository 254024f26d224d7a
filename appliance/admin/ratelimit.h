/*
 * Per-address token buckets: each address may spend `burst` attempts at
 * once and earns `per_minute` back each minute.  A fixed table (the
 * least recently seen address gives up its slot), so a flood of
 * addresses costs no memory.
 */
#ifndef PRIVAI_ADMIN_RATELIMIT_H
#define PRIVAI_ADMIN_RATELIMIT_H

#include <pthread.h>
#include <stdint.h>

#define RATELIMIT_SLOTS 512

struct ratelimit_slot {
	char addr[64];
	double tokens;
	int64_t last_ms;
};

struct ratelimit {
	pthread_mutex_t mu;
	double per_minute, burst;
	struct ratelimit_slot slot[RATELIMIT_SLOTS];
};

void ratelimit_init(struct ratelimit *rl, double per_minute, double burst);
void ratelimit_destroy(struct ratelimit *rl);
/* 0: allowed (one token spent); otherwise the seconds until one is earned. */
int ratelimit_take(struct ratelimit *rl, const char *addr, int64_t now_ms);

#endif
