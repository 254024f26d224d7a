/* privai-fabric's settings. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "settings.h"

static const char *const mode_names[] = { "bare-metal", "shared-nvswitch", "vgpu" };
static const char *const level_names[] = { "none", "critical", "error", "warning", "info" };

const char *
fabric_mode_name(int mode)
{
	return mode >= 0 && mode < 3 ? mode_names[mode] : "unknown";
}

int
fabric_settings_file(const char *path, char *err, size_t errsize)
{
	char line[1024];
	int n = 0;
	FILE *fp = fopen(path, "r");

	if (fp == NULL) {
		snprintf(err, errsize, "%s: %s", path, strerror(errno));
		return APP_EIO;
	}
	while (fgets(line, sizeof(line), fp) != NULL) {
		char *p, *eq;
		n++;
		if (strchr(line, '\n') == NULL && !feof(fp)) {
			snprintf(err, errsize, "%s:%d: line longer than %zu bytes", path, n, sizeof(line) - 2);
			fclose(fp);
			return APP_EINVAL;
		}
		line[strcspn(line, "\r\n")] = '\0';
		p = line + strspn(line, " \t");
		if (*p == '#' || *p == '\0')
			continue;
		eq = strchr(p, '=');
		if (eq == NULL || strncmp(p, "PRIVAI_FABRIC_", 14) != 0 || eq == p + 14) {
			snprintf(err, errsize, "%s:%d: expected PRIVAI_FABRIC_NAME=VALUE", path, n);
			fclose(fp);
			return APP_EINVAL;
		}
		*eq = '\0';
		if (setenv(p, eq + 1, 0) < 0) {
			snprintf(err, errsize, "%s:%d: %s", path, n, strerror(errno));
			fclose(fp);
			return APP_EINVAL;
		}
	}
	fclose(fp);
	return 0;
}

static const char *
env(const char *name)
{
	const char *v = getenv(name);

	return v != NULL && *v != '\0' ? v : NULL;
}

static int
choice(const char *name, const char *const *names, int count, int def, int *out, char *err, size_t errsize)
{
	const char *v = env(name);
	char allowed[128] = "";

	*out = def;
	if (v == NULL)
		return 0;
	for (int i = 0; i < count; i++) {
		size_t n = strlen(allowed);
		if (strcmp(v, names[i]) == 0) {
			*out = i;
			return 0;
		}
		snprintf(allowed + n, sizeof(allowed) - n, "%s%s", i ? ", " : "", names[i]);
	}
	snprintf(err, errsize, "%s is '%s'; it takes %s", name, v, allowed);
	return APP_EINVAL;
}

static int
yes_no(const char *name, int def, int *out, char *err, size_t errsize)
{
	static const char *const names[] = { "no", "yes" };

	return choice(name, names, 2, def, out, err, errsize);
}

static int
number(const char *name, long lo, long hi, int def, int *out, char *err, size_t errsize)
{
	const char *v = env(name);
	char *end;
	long n;

	*out = def;
	if (v == NULL)
		return 0;
	errno = 0;
	n = strtol(v, &end, 10);
	if (*end != '\0' || errno != 0 || n < lo || n > hi) {
		snprintf(err, errsize, "%s is '%s'; it takes a whole number from %ld to %ld", name, v, lo, hi);
		return APP_EINVAL;
	}
	*out = (int)n;
	return 0;
}

/* An absolute path without characters Fabric Manager's config or a unit would misread. */
static int
path(const char *name, const char *def, char *out, size_t size, char *err, size_t errsize)
{
	const char *v = env(name);

	if (v == NULL)
		v = def;
	if (v[0] != '/' || strlen(v) >= size || strpbrk(v, "\n\r\t =#\"'") != NULL) {
		snprintf(err, errsize,
			 "%s is '%s'; it takes an absolute path under %zu characters, without spaces, quotes, "
			 "'=' or '#'",
			 name, v, size);
		return APP_EINVAL;
	}
	snprintf(out, size, "%s", v);
	return 0;
}

static int
unit_name(const char *name, const char *def, char *out, size_t size, char *err, size_t errsize)
{
	const char *v = env(name);
	size_t n;

	if (v == NULL)
		v = def;
	n = strlen(v);
	if (n >= size || n < 9 || strcmp(v + n - 8, ".service") != 0 ||
	    strspn(v, "abcdefghijklmnopqrstuvwxyz"
		      "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.@") != n) {
		snprintf(err, errsize, "%s is '%s'; it takes a unit name ending in .service", name, v);
		return APP_EINVAL;
	}
	snprintf(out, size, "%s", v);
	return 0;
}

static int
ipv4(const char *name, const char *def, char *out, size_t size, char *err, size_t errsize)
{
	const char *v = env(name);
	struct in_addr a;

	if (v == NULL)
		v = def;
	if (inet_pton(AF_INET, v, &a) != 1) {
		snprintf(err, errsize, "%s is '%s'; Fabric Manager binds an IPv4 address, like 127.0.0.1", name, v);
		return APP_EINVAL;
	}
	snprintf(out, size, "%s", v);
	return 0;
}

int
fabric_settings_load(struct fabric_settings *s, char *err, size_t errsize)
{
	static const char *const buses[] = { "system", "user" };

	memset(s, 0, sizeof(*s));
	if (choice("PRIVAI_FABRIC_MODE", mode_names, 3, FM_MODE_BARE_METAL, &s->mode, err, errsize) < 0 ||
	    choice("PRIVAI_FABRIC_LOG_LEVEL", level_names, 5, 4, &s->log_level, err, errsize) < 0 ||
	    path("PRIVAI_FABRIC_LOG_FILE", "/var/log/fabricmanager.log", s->log_file, sizeof(s->log_file), err,
		 errsize) < 0 ||
	    yes_no("PRIVAI_FABRIC_LOG_SYSLOG", 0, &s->log_syslog, err, errsize) < 0 ||
	    ipv4("PRIVAI_FABRIC_BIND_ADDRESS", "127.0.0.1", s->bind_address, sizeof(s->bind_address), err, errsize) <
		    0 ||
	    number("PRIVAI_FABRIC_ACCESS_LINK_FAILURE_MODE", 0, 1, 0, &s->access_link_failure_mode, err, errsize) < 0 ||
	    number("PRIVAI_FABRIC_TRUNK_LINK_FAILURE_MODE", 0, 1, 0, &s->trunk_link_failure_mode, err, errsize) < 0 ||
	    number("PRIVAI_FABRIC_NVSWITCH_FAILURE_MODE", 0, 1, 0, &s->nvswitch_failure_mode, err, errsize) < 0 ||
	    yes_no("PRIVAI_FABRIC_STAY_RESIDENT_ON_FAILURES", 0, &s->stay_resident, err, errsize) < 0 ||
	    yes_no("PRIVAI_FABRIC_ABORT_CUDA_JOBS_ON_EXIT", 1, &s->abort_cuda_jobs, err, errsize) < 0 ||
	    path("PRIVAI_FABRIC_FM_CONFIG", "/usr/share/nvidia/nvswitch/fabricmanager.cfg", s->fm_config,
		 sizeof(s->fm_config), err, errsize) < 0 ||
	    unit_name("PRIVAI_FABRIC_FM_UNIT", "nvidia-fabricmanager.service", s->fm_unit, sizeof(s->fm_unit), err,
		      errsize) < 0 ||
	    choice("PRIVAI_FABRIC_BUS", buses, 2, 0, &s->user_bus, err, errsize) < 0 ||
	    number("PRIVAI_FABRIC_READY_TIMEOUT", 1, 3600, 240, &s->ready_timeout_s, err, errsize) < 0 ||
	    path("PRIVAI_FABRIC_STATUS_SOCKET", "/run/privai/fabric.sock", s->status_socket, sizeof(s->status_socket),
		 err, errsize) < 0 ||
	    number("PRIVAI_FABRIC_INTERVAL", 1, 3600, 10, &s->interval_s, err, errsize) < 0 ||
	    path("PRIVAI_FABRIC_NCCL_TOPO_FILE", "/etc/privai/nccl-topo.xml", s->nccl_topo_file,
		 sizeof(s->nccl_topo_file), err, errsize) < 0 ||
	    path("PRIVAI_FABRIC_NCCL_ENV", "/etc/privai/nccl.env", s->nccl_env_file, sizeof(s->nccl_env_file), err,
		 errsize) < 0 ||
	    path("PRIVAI_FABRIC_VALIDATION", "/var/lib/privai-fabric/validation.json", s->validation_file,
		 sizeof(s->validation_file), err, errsize) < 0)
		return APP_EINVAL;
	return 0;
}
