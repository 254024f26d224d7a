/* The admin's route tables, gathered (api/routes.h). */
#include "api/routes.h"

const struct route *const api_route_tables[] = {
	api_auth_routes,
	api_users_routes,
	api_tokens_routes,
	api_system_routes,
	api_models_routes,
	api_sizing_routes,
	api_deployments_routes,
	api_deploy_ops_routes,
	api_gpus_routes,
	api_nodes_routes,
	api_tls_routes,
	api_backups_routes,
	api_remote_routes,
	api_relay_routes,
	api_uploads_routes,
	api_metrics_routes,
	api_tasks_routes,
	api_vms_routes,
	NULL,
};

void
routes_each(void (*fn)(const struct route *rt, void *arg), void *arg)
{
	for (size_t t = 0; api_route_tables[t] != NULL; t++)
		for (const struct route *rt = api_route_tables[t]; rt->method != NULL; rt++)
			fn(rt, arg);
}
