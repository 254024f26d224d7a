/*
 * Every REST resource's route table, in the order the daemon matches
 * them: what main gives the HTTP layer (struct admin's routes), and what
 * --list-routes, the OpenAPI check and the attacker suite read.
 */
#ifndef PRIVAI_ADMIN_API_ROUTES_H
#define PRIVAI_ADMIN_API_ROUTES_H

#include "http/httpd.h"

/* Each table ends with an entry whose method is NULL; the list with NULL. */
extern const struct route *const api_route_tables[];

extern const struct route api_auth_routes[], api_users_routes[], api_tokens_routes[], api_system_routes[],
	api_models_routes[], api_sizing_routes[], api_deployments_routes[], api_deploy_ops_routes[], api_gpus_routes[],
	api_nodes_routes[], api_tls_routes[], api_backups_routes[], api_remote_routes[], api_relay_routes[],
	api_uploads_routes[], api_metrics_routes[], api_tasks_routes[], api_vms_routes[];

/* Calls fn for every route. */
void routes_each(void (*fn)(const struct route *rt, void *arg), void *arg);

#endif
