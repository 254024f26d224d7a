/* Token buckets keyed by client address. */
#include <string.h>

#include "ratelimit.h"

void
ratelimit_init(struct ratelimit *rl, double per_minute, double burst)
{
	memset(rl, 0, sizeof(*rl));
	pthread_mutex_init(&rl->mu, NULL);
	rl->per_minute = per_minute;
	rl->burst = burst;
}

void
ratelimit_destroy(struct ratelimit *rl)
{
	pthread_mutex_destroy(&rl->mu);
}

int
ratelimit_take(struct ratelimit *rl, const char *addr, int64_t now_ms)
{
	struct ratelimit_slot *s = NULL, *oldest = &rl->slot[0];
	int wait = 0;

	pthread_mutex_lock(&rl->mu);
	for (int i = 0; i < RATELIMIT_SLOTS; i++) {
		if (rl->slot[i].addr[0] != '\0' && strcmp(rl->slot[i].addr, addr) == 0) {
			s = &rl->slot[i];
			break;
		}
		if (rl->slot[i].last_ms < oldest->last_ms)
			oldest = &rl->slot[i];
	}
	if (s == NULL) {
		s = oldest;
		memset(s, 0, sizeof(*s));
		strncpy(s->addr, addr, sizeof(s->addr) - 1);
		s->tokens = rl->burst;
	} else {
		s->tokens += (double)(now_ms - s->last_ms) * rl->per_minute / 60000.0;
		if (s->tokens > rl->burst)
			s->tokens = rl->burst;
	}
	s->last_ms = now_ms;
	if (s->tokens >= 1.0)
		s->tokens -= 1.0;
	else
		wait = (int)((1.0 - s->tokens) * 60.0 / rl->per_minute) + 1;
	pthread_mutex_unlock(&rl->mu);
	return wait;
}
