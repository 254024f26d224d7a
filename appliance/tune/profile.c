/* The two tuning profiles and why each value is what it is. */
#include <string.h>

#include "profile.h"

static const struct profile profiles[] = {
	{
		.name = "gpu-inference",
		.governor = "performance", /* the CPU feeds kernels: no ramp-up latency */
		.epp = "performance",
		.thp = "madvise",    /* no khugepaged compaction stalls on the hot path */
		.hugepages = 0,      /* static huge pages are memory the engine cannot use */
		.numa_balancing = 0, /* pages must not migrate away from pinned threads */
		.swappiness_max = 10,
		.swappiness = 1,
		.memlock_unlimited = 1, /* RDMA registers (pins) every buffer it sends */
		.gpu = 1,
	},
	{
		.name = "cpu-inference",
		.governor = "performance",
		.epp = "performance",
		.thp = "madvise",
		.hugepages = 0,
		.numa_balancing = 0, /* one engine process per socket, memory local to it */
		.swappiness_max = 10,
		.swappiness = 1,
		.memlock_unlimited = 0, /* nothing pins memory without RDMA */
		.gpu = 0,
	},
};

const struct profile *
profile_get(const char *name)
{
	for (size_t i = 0; i < sizeof(profiles) / sizeof(profiles[0]); i++)
		if (strcmp(profiles[i].name, name) == 0)
			return &profiles[i];
	return NULL;
}

const struct profile *
profile_default(int n_gpus)
{
	return &profiles[n_gpus > 0 ? 0 : 1];
}

const char *
profile_names(void)
{
	return "gpu-inference, cpu-inference";
}
