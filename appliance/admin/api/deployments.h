/*
 * What the deployment resources (api/deployments.c, api/deployment_ops.c,
 * api/relay.c) share: replies, and requests passed on to an engine
 * (api/forward.c).
 */
#ifndef PRIVAI_ADMIN_API_DEPLOYMENTS_H
#define PRIVAI_ADMIN_API_DEPLOYMENTS_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "deploy/deployments.h"

struct req;

/* Send the request (its body when post) to url with Authorization:
 * auth (NULL: none), checking the far end's key pin when one is given,
 * and reply with its answer as it arrives (api/forward.c: a streamed
 * completion's events are passed on one by one); who names the far end
 * in a 502. */
void deploy_forward(struct req *r, const char *url, const char *auth, const char *pin, int post, const char *who);
/* Close the connections deploy_forward keeps open between requests. */
void deploy_forward_shutdown(void);

/* A deployment the cluster's leader placed on this node is changed on
 * the leader only: 1 after replying 409. */
int deploy_refuse_if_leader_owned(struct req *r, int64_t id);

/* Reply with the tail of deployment id's engine log on this node
 * (the "lines" query, 1..10000, default 200). */
void deploy_reply_log(struct req *r, int64_t id);

/* Whether the model's heads split over n ranks (the heads divide, the KV
 * heads divide or are divided): 0, or -1 after replying 422 on field. */
int deploy_split_heads(struct req *r, int64_t model_id, int n, const char *field);

/* placement.ranks (api/deployment_ranks.c): the nodes the model is
 * split over, rank 0 this node first; checked against the nodes and this
 * node's engine (its Gloo collectives on CPUs, NCCL's on GPUs), and for
 * a CPU placement (gpus 0) the model's heads, then added to out.  A GPU
 * placement's heads and GPUs are gpu_place_group()'s.  0, or -1 after
 * replying. */
int deploy_ranks_field(struct req *r, const cJSON *p, int64_t model_id, int64_t node_id, int64_t threads, int gpus,
		       cJSON *out);
/* Store deployment id's follower ranks as its placement names them (none
 * when it is not split) and pick its rank 0's rendezvous port once;
 * inside the caller's transaction.  0, or -1 after replying. */
int deploy_store_ranks(struct req *r, int64_t id, const char *placement);

/* Stop the split deployments a node going away (drained, removed) holds
 * a rank of: is_self, rank 0 here; else a follower there.  They are not
 * moved: placement.ranks names the nodes, and only its owner changes it.
 * Inside the caller's transaction; the store's result code. */
int deploy_stop_split_on(struct req *r, int64_t node_id, int is_self, const char *node, const char *why);

/* The deployment's row with "api_key" added. */
void reply_deployment_with_key(struct req *r, unsigned status, int64_t id, const char *key);

#endif
