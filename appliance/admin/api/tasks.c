/*
 * Tasks over HTTP (store/tasks.h), for every signed-in user: the long
 * operations of everyone, newest first, with their progress and result.
 *   GET /api/v1/tasks[?state=running|done|failed][&limit=N]
 *   GET /api/v1/tasks/{id}      one, with its log
 */
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "admin.h"
#include "http/httpd.h"

#define TASK_FIELDS "id, kind, target, ref, actor, state, progress, started_at, ended_at, result"

static void
h_list(struct req *r)
{
	const char *state = query_arg(r, "state"), *q_limit = query_arg(r, "limit");
	char *end;
	long long limit = 100;
	int64_t args[2];

	if (state != NULL && strcmp(state, "running") != 0 && strcmp(state, "done") != 0 &&
	    strcmp(state, "failed") != 0) {
		reply_error(r, 422, "invalid_field", "state", "state must be running, done or failed");
		return;
	}
	if (q_limit != NULL && ((limit = strtoll(q_limit, &end, 10)) < 1 || limit > 1000 || *end != '\0')) {
		reply_error(r, 422, "invalid_field", "limit", "limit must be 1..1000");
		return;
	}
	args[0] = limit;
	args[1] = state == NULL ? 0 : strcmp(state, "running") == 0 ? 1 : strcmp(state, "done") == 0 ? 2 : 3;
	reply_query(r, 200,
		    "SELECT " TASK_FIELDS " FROM tasks WHERE ?2 = 0 OR state = "
		    "CASE ?2 WHEN 1 THEN 'running' WHEN 2 THEN 'done' ELSE 'failed' END "
		    "ORDER BY id DESC LIMIT ?1",
		    2, args, NULL);
}

static void
h_get(struct req *r)
{
	int64_t id = arg_id(r, 0, "task");

	if (id < 0)
		return;
	reply_query(r, 200, "SELECT " TASK_FIELDS ", log FROM tasks WHERE id = ?1", 1, &id, "task");
}

const struct route api_tasks_routes[] = {
	{ "GET", "/api/v1/tasks", ROLE_VIEWER, 0, h_list, NULL, NULL },
	{ "GET", "/api/v1/tasks/{id}", ROLE_VIEWER, 0, h_get, NULL, NULL },
	{ NULL, NULL, 0, 0, NULL, NULL, NULL },
};
