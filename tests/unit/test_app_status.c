/*
 * appliance/lib: the appliance's status codes and its two ways of
 * building text: str_fmt fails rather than cut (a cut path names another
 * file) and leaves nothing half-written; msg_fmt cuts on purpose.
 * hostfs_read_long's two failures are told apart by name.
 */
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "hostfs.h"
#include "status.h"
#include "strfmt.h"
#include "testlib.h"

static void
test_codes(void)
{
	char err[APP_ERR_LEN];

	CHECK(app_fail(err, APP_ENOTFOUND, "no %s", "thing") == APP_ENOTFOUND && strcmp(err, "no thing") == 0,
	      "app_fail returns its code and writes the line: %s", err);
	CHECK(app_fail(NULL, APP_EIO, "x") == APP_EIO, "app_fail takes a NULL buffer");
	CHECK(strcmp(app_status_str(APP_EDENIED), "denied") == 0 &&
		      strcmp(app_status_str(12345), "unknown status") == 0,
	      "every code has a name, an unknown one too");
	CHECK(APP_OK == 0 && APP_EIO < 0 && APP_EDENIED < 0, "success is 0, failures are negative");
}

static void
test_str_fmt(void)
{
	char buf[8];

	CHECK(str_fmt(buf, sizeof(buf), "%s/%s", "ab", "cd") == APP_OK && strcmp(buf, "ab/cd") == 0,
	      "a path that fits");
	CHECK(str_fmt(buf, sizeof(buf), "%s", "1234567") == APP_OK && strcmp(buf, "1234567") == 0,
	      "exactly the buffer less its NUL fits");
	strcpy(buf, "old");
	CHECK(str_fmt(buf, sizeof(buf), "%s", "12345678") == APP_ERANGE && buf[0] == '\0',
	      "one byte too many: APP_ERANGE, and no half path left behind (%s)", buf);
	CHECK(str_fmt(buf, 0, "x") == APP_ERANGE, "a buffer of no bytes");
	msg_fmt(buf, sizeof(buf), "%s", "a long message");
	CHECK(strcmp(buf, "a long ") == 0, "msg_fmt cuts a message to its buffer: '%s'", buf);
}

static void
test_read_long(void)
{
	char dir[] = "/tmp/privai-status-XXXXXX", path[64];
	long long v = 0;

	if (mkdtemp(dir) == NULL) {
		SKIP("no scratch directory");
		return;
	}
	snprintf(path, sizeof(path), "%s/n", dir);
	int fd = open(path, O_WRONLY | O_CREAT, 0600);
	CHECK(fd >= 0 && write(fd, "42\n", 3) == 3, "wrote a number");
	if (fd >= 0)
		close(fd);
	CHECK(hostfs_read_long(dir, "/n", 10, &v) == APP_OK && v == 42, "a number is read");
	CHECK(hostfs_read_long(dir, "/missing", 10, &v) == APP_ENOTFOUND, "a missing file is APP_ENOTFOUND");
	fd = open(path, O_WRONLY | O_TRUNC, 0600);
	CHECK(fd >= 0 && write(fd, "forty\n", 6) == 6, "wrote a word");
	if (fd >= 0)
		close(fd);
	CHECK(hostfs_read_long(dir, "/n", 10, &v) == APP_EFORMAT, "a file that holds no number is APP_EFORMAT");
	unlink(path);
	rmdir(dir);
}

int
main(void)
{
	test_codes();
	test_str_fmt();
	test_read_long();
	return test_summary();
}
