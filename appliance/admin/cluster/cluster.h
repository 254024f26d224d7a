/*
 * The cluster thread.  On every node it reports this node's inventory
 * into its own store once a heartbeat.  On the node others joined it
 * marks a node that missed three heartbeats unreachable.  On a node that
 * was started with --join it joins once (a one-time token), then sends a
 * heartbeat with its report every heartbeat_s seconds, applies the MIG
 * layouts the answer plans for its GPUs, and follows a drain or resume
 * the other console ordered.
 */
#ifndef PRIVAI_ADMIN_CLUSTER_H
#define PRIVAI_ADMIN_CLUSTER_H

struct admin;

int cluster_start(struct admin *a, char *err);
void cluster_stop(struct admin *a);

#endif
