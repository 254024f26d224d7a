/*
 * The NCCL settings of this machine, for GPU ranks: the topology file
 * privai-fabric writes (in a VM the PCIe tree NCCL sees is virtual, and
 * the file tells it which NIC sits by which GPU) and the NCCL_* settings
 * of nccl.env beside it (NCCL_IB_HCA, NCCL_SOCKET_IFNAME, ...).  Both
 * live in PRIVAI_NCCL_CONFIG_DIR (default /etc/privai); a variable
 * already set in the environment wins, so an operator can override one
 * for a single run.  nccl.env is outside input: a line that is not
 * NCCL_NAME=VALUE refuses the start, naming the file and line.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

#define NCCL_ENV_MAX_LINE 4096

/* NCCL_ then capitals, digits and underscores. */
static int
nccl_name(const char *s, size_t len)
{
	if (len <= 5 || strncmp(s, "NCCL_", 5) != 0)
		return 0;
	for (size_t i = 5; i < len; i++)
		if (!isupper((unsigned char)s[i]) && !isdigit((unsigned char)s[i]) && s[i] != '_')
			return 0;
	return 1;
}

/* Add "NAME=VALUE" to the summary line, cut short when it is full. */
static void
note(char *said, size_t size, const char *name, const char *value, const char *from)
{
	size_t len = strlen(said);

	if (len + 1 < size)
		snprintf(said + len, size - len, "%s%.100s=%.300s (%.40s)", len ? ", " : "", name, value, from);
}

int
cli_tp_nccl_env(const char *cmd)
{
	const char *dir = getenv("PRIVAI_NCCL_CONFIG_DIR");
	char path[4096], line[NCCL_ENV_MAX_LINE + 2], said[1024] = "";
	FILE *fp;
	int n = 0;

	if (dir == NULL || dir[0] == '\0')
		dir = "/etc/privai";
	snprintf(path, sizeof(path), "%s/nccl-topo.xml", dir);
	if (getenv("NCCL_TOPO_FILE") == NULL && access(path, R_OK) == 0) {
		if (setenv("NCCL_TOPO_FILE", path, 1) != 0)
			return cli_error(cmd, "cannot set NCCL_TOPO_FILE");
		note(said, sizeof(said), "NCCL_TOPO_FILE", path, "privai-fabric's topology");
	}
	snprintf(path, sizeof(path), "%s/nccl.env", dir);
	if ((fp = fopen(path, "r")) != NULL) {
		while (fgets(line, sizeof(line), fp) != NULL) {
			size_t len = strlen(line);
			n++;
			if (len > NCCL_ENV_MAX_LINE) {
				fclose(fp);
				return cli_error(cmd, "%s:%d: a line longer than %d bytes", path, n, NCCL_ENV_MAX_LINE);
			}
			while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' '))
				line[--len] = '\0';
			const char *s = line;
			while (*s == ' ' || *s == '\t')
				s++;
			if (*s == '\0' || *s == '#')
				continue;
			const char *eq = strchr(s, '=');
			int printable = 1;
			for (const char *p = s; *p != '\0'; p++)
				printable &= isprint((unsigned char)*p) != 0;
			if (eq == NULL || !nccl_name(s, (size_t)(eq - s)) || !printable) {
				fclose(fp);
				return cli_error(cmd,
						 "%s:%d: not an NCCL setting (NCCL_NAME=VALUE, printable): '%.80s'",
						 path, n, s);
			}
			char name[128];
			if ((size_t)(eq - s) >= sizeof(name)) {
				fclose(fp);
				return cli_error(cmd, "%s:%d: the name is too long", path, n);
			}
			memcpy(name, s, (size_t)(eq - s));
			name[eq - s] = '\0';
			if (getenv(name) != NULL)
				continue;
			if (setenv(name, eq + 1, 1) != 0) {
				fclose(fp);
				return cli_error(cmd, "cannot set %s", name);
			}
			note(said, sizeof(said), name, eq + 1, "nccl.env");
		}
		fclose(fp);
	}
	if (said[0] != '\0')
		fprintf(stderr, "privai-engine %s: NCCL settings: %s\n", cmd, said);
	return 0;
}
