/*
 * Tuning profiles: the values a host should have for one kind of work.
 * `check` compares the host against a profile; `apply` sets it.
 */
#ifndef PRIVAI_TUNE_PROFILE_H
#define PRIVAI_TUNE_PROFILE_H

struct profile {
	const char *name;
	const char *governor;  /* scaling_governor of every CPU */
	const char *epp;       /* energy_performance_preference */
	const char *thp;       /* transparent_hugepage/enabled */
	long hugepages;        /* static huge pages reserved */
	long numa_balancing;   /* kernel.numa_balancing */
	long swappiness_max;   /* what check accepts */
	long swappiness;       /* what apply sets */
	int memlock_unlimited; /* DefaultLimitMEMLOCK=infinity for services */
	int gpu;               /* persistence, peer memory, NIC IRQs */
};

/* NULL when there is no profile of that name. */
const struct profile *profile_get(const char *name);

/* gpu-inference on a host with NVIDIA GPUs, cpu-inference elsewhere. */
const struct profile *profile_default(int n_gpus);

/* "gpu-inference, cpu-inference" */
const char *profile_names(void);

#endif
