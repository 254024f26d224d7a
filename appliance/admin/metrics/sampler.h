/*
 * The metrics history: a thread that samples, every interval (a minute by
 * default), each local deployment's engine (/metrics: tokens/s, requests,
 * TTFT and ITL percentiles, queue, KV-cache use), this node (CPU, memory,
 * network) and each GPU and MIG instance NVML sees (utilization, memory,
 * temperature, power, ECC errors), and keeps the samples in the store for
 * the hours configured (metric_samples; api/metrics.c reads them).
 */
#ifndef PRIVAI_ADMIN_SAMPLER_H
#define PRIVAI_ADMIN_SAMPLER_H

struct admin;

int metrics_start(struct admin *a, char *err);
void metrics_stop(struct admin *a);

#endif
