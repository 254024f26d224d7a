/*
 * privai-fabric's settings: PRIVAI_FABRIC_* from the environment, which
 * a KEY=VALUE config file fills where the environment is silent (so
 * cloud-init writes the file and a systemd drop-in can still override).
 * Every value is checked; a bad one is an error naming the setting and
 * what it accepts.
 */
#ifndef PRIVAI_FABRIC_SETTINGS_H
#define PRIVAI_FABRIC_SETTINGS_H

#include <stddef.h>

enum { FM_MODE_BARE_METAL, FM_MODE_SHARED_NVSWITCH, FM_MODE_VGPU };

struct fabric_settings {
	int mode;      /* FM_MODE_*: Fabric Manager's FABRIC_MODE */
	int log_level; /* 0 none .. 4 info, as Fabric Manager numbers them */
	char log_file[256];
	int log_syslog;
	char bind_address[16]; /* IPv4, dotted */
	int access_link_failure_mode, trunk_link_failure_mode, nvswitch_failure_mode;
	int stay_resident;
	int abort_cuda_jobs;
	char fm_config[256];
	char fm_unit[128];
	int user_bus; /* the systemd user manager (tests), not the system one */
	int ready_timeout_s;
	char status_socket[108]; /* sun_path's size */
	int interval_s;
	char nccl_topo_file[256];
	char nccl_env_file[256];
	char validation_file[256];
};

/* Read a config file of PRIVAI_FABRIC_NAME=VALUE lines into the
 * environment where it has no value yet.  0, or an APP_E* code with err naming the
 * line. */
int fabric_settings_file(const char *path, char *err, size_t errsize);

/* The settings from the environment, defaults elsewhere.  0, or an APP_E* code with err. */
int fabric_settings_load(struct fabric_settings *s, char *err, size_t errsize);

const char *fabric_mode_name(int mode);

#endif
