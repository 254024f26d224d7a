/*
 * Reading a setting from systemd's manager configuration the way systemd
 * does: the main file (/etc/systemd/NAME), then drop-ins NAME.d/NN-*.conf
 * from /usr/lib, /run and /etc in file-name order, a name in /etc masking
 * the same name elsewhere; the last assignment wins.
 */
#ifndef PRIVAI_TUNE_SYSTEMD_CONF_H
#define PRIVAI_TUNE_SYSTEMD_CONF_H

#include <stddef.h>

/* value "" when never set; where names the file that set it. */
void systemd_conf_get(const char *root, const char *name, const char *section, const char *key, char *value,
		      size_t vsize, char *where, size_t wsize);

#endif
