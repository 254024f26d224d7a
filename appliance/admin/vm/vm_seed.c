/*
 * A NoCloud seed for a workload VM (cloud-init's "cidata" ISO 9660
 * volume: user-data and meta-data at its root), made with xorriso.  With
 * the privai image as the VM's disk, the user-data makes it a member of
 * this appliance at first boot (docs/cloud-init.md: privai.role member,
 * join_url, join_token, join_pin).  The token is a secret: the files are
 * written 0600 in a directory of their own, removed once the ISO holds
 * them, and the ISO is 0600 (libvirt hands it to qemu's user at start).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "status.h"
#include "strfmt.h"
#include "vm/vm.h"

static int
write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	size_t len = strlen(text);

	if (fd < 0)
		return -1;
	ssize_t n = write(fd, text, len);
	return close(fd) == 0 && n == (ssize_t)len ? 0 : -1;
}

/* xorriso, quiet, its words kept for the error; 0 when it exited 0. */
static int
run_xorriso(char *const argv[], char *err)
{
	int p[2], status = 0;
	char out[512];
	ssize_t n = 0;

	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	pid_t pid = fork();
	if (pid < 0) {
		close(p[0]);
		close(p[1]);
		return -1;
	}
	if (pid == 0) {
		dup2(p[1], 1);
		dup2(p[1], 2);
		execvp(argv[0], argv);
		_exit(127);
	}
	close(p[1]);
	for (ssize_t got; n < (ssize_t)sizeof(out) - 1 && (got = read(p[0], out + n, sizeof(out) - 1 - (size_t)n)) > 0;)
		n += got;
	out[n] = '\0';
	close(p[0]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	msg_fmt(err, VM_ERR_LEN, "making the NoCloud seed with xorriso failed%s: %.300s",
		WIFEXITED(status) && WEXITSTATUS(status) == 127 ? " (xorriso is not installed)" : "", out);
	return -1;
}

int
vm_seed_write(const char *dir, const char *name, const char *user_data, char *path, size_t size, char *err)
{
	char tmp[1100], ud[1200], md[1200], meta[256];
	int rc = -1;

	if (str_fmt(tmp, sizeof(tmp), "%s/.%s-seed", dir, name) != APP_OK ||
	    str_fmt(ud, sizeof(ud), "%s/user-data", tmp) != APP_OK ||
	    str_fmt(md, sizeof(md), "%s/meta-data", tmp) != APP_OK ||
	    str_fmt(path, size, "%s/%s-seed.iso", dir, name) != APP_OK) {
		msg_fmt(err, VM_ERR_LEN, "the seed's path under %s is too long", dir);
		return -1;
	}
	snprintf(meta, sizeof(meta), "instance-id: %s\nlocal-hostname: %s\n", name, name);
	if (mkdir(tmp, 0700) != 0 && errno != EEXIST) {
		msg_fmt(err, VM_ERR_LEN, "cannot make %s: %s", tmp, strerror(errno));
		return -1;
	}
	if (write_file(ud, user_data) < 0 || write_file(md, meta) < 0) {
		msg_fmt(err, VM_ERR_LEN, "cannot write the seed's files in %s: %s", tmp, strerror(errno));
	} else {
		char *argv[] = { "xorriso", "-as",     "mkisofs", "-quiet", "-output", path, "-volid",
				 "cidata",  "-joliet", "-rock",   ud,       md,        NULL };
		(void)unlink(path);
		int fd =
			open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600); /* 0600 before a byte */
		if (fd < 0)
			msg_fmt(err, VM_ERR_LEN, "cannot create %s: %s", path, strerror(errno));
		else if (close(fd) == 0 && run_xorriso(argv, err) == 0)
			rc = 0;
	}
	(void)unlink(ud);
	(void)unlink(md);
	(void)rmdir(tmp);
	if (rc < 0)
		(void)unlink(path);
	return rc;
}
