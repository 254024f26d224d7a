/*
 * Reading and writing the host's /proc, /sys and /etc under a root
 * prefix, so every host service runs unchanged against a fixture tree
 * (`--root DIR`; "/" on a real host).  Files are opened O_NONBLOCK and
 * must be regular: a FIFO or a directory where a sysfs attribute should
 * be is an unreadable file, never a hang.  Reads are bounded.
 */
#ifndef PRIVAI_HOSTFS_H
#define PRIVAI_HOSTFS_H

#include <stddef.h>
#include <sys/types.h>

#define HOSTFS_TEXT_MAX (4 << 20) /* the largest text file read whole (cpuinfo of 1024 CPUs fits) */

/* root + path into out; APP_ERANGE when it does not fit. */
int hostfs_path(const char *root, const char *path, char *out, size_t size);

/* The first line of a small file, newline and trailing blanks removed.
 * 0, or APP_ENOTFOUND (missing, unreadable, empty). */
int hostfs_read_line(const char *root, const char *path, char *out, size_t size);

/* A whole file, at most max bytes, NUL-terminated, malloc'd; NULL when it
 * cannot be read.  *len gets its length when len is not NULL. */
char *hostfs_read_text(const char *root, const char *path, size_t max, size_t *len);

/* Up to size bytes of a binary file (PCI config space); bytes read or APP_EIO. */
ssize_t hostfs_read_bytes(const char *root, const char *path, void *buf, size_t size);

/* A decimal (or 0x hex when base is 16) integer file.  0 with *v set,
 * APP_ENOTFOUND when missing or unreadable, APP_EFORMAT when it
 * holds something else. */
int hostfs_read_long(const char *root, const char *path, int base, long long *v);

/* The last component of a symlink's target ("driver" -> "nvidia");
 * APP_ENOTFOUND when it is not a link. */
int hostfs_link_name(const char *root, const char *path, char *out, size_t size);

/* A symlink's target as written ("/lib/systemd/system/x.service");
 * APP_ENOTFOUND when path is not a link. */
int hostfs_link_target(const char *root, const char *path, char *out, size_t size);

/* The path, inside root, a path resolves to (sysfs links are relative,
 * so a fixture's links resolve inside the fixture); APP_ENOTFOUND when it
 * does not resolve or leaves root. */
int hostfs_resolve(const char *root, const char *path, char *out, size_t size);

/* Whether something exists at path (any type). */
int hostfs_exists(const char *root, const char *path);

/* Names in a directory, sorted, "." and ".." left out: a malloc'd array of
 * malloc'd strings (free with hostfs_free_names), *n set; NULL with *n 0
 * when the directory cannot be read.  At most max names are kept. */
char **hostfs_list(const char *root, const char *dir, int max, int *n);
void hostfs_free_names(char **names, int n);

/* Replace a file's contents (sysfs and procfs attributes are written in
 * place; a regular file under /etc through a temporary file and rename,
 * so a crash leaves the old or the new file).  0, or APP_EIO with errno. */
int hostfs_write(const char *root, const char *path, const char *data, size_t len, int atomic);

/* Install a config file: its parent directories made (0755) as needed,
 * then written whole (temporary file, fsync, rename) with `mode`, unless
 * it already holds exactly `data` with that mode.  *ret_changed (may be
 * NULL) says whether it was written.  0, or an APP_E* code with errno. */
int hostfs_install(const char *root, const char *path, const char *data, size_t len, mode_t mode, int *ret_changed);

#endif
