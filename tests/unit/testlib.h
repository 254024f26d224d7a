/*
 * A minimal test harness: CHECK counts a pass or prints the failure with its
 * location; test_summary() prints "N passed, N failed" (the line
 * tests/run-all.sh adds up) and gives the exit status.
 */
#ifndef PRIVAI_TESTLIB_H
#define PRIVAI_TESTLIB_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int tl_pass, tl_fail, tl_skip;

#define CHECK(cond, ...)                                                                                               \
	do {                                                                                                           \
		if (cond) {                                                                                            \
			tl_pass++;                                                                                     \
		} else {                                                                                               \
			tl_fail++;                                                                                     \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                           \
			fprintf(stderr, __VA_ARGS__);                                                                  \
			fputc('\n', stderr);                                                                           \
		}                                                                                                      \
	} while (0)

#define SKIP(...)                                                                                                      \
	do {                                                                                                           \
		tl_skip++;                                                                                             \
		fprintf(stderr, "SKIP: ");                                                                             \
		fprintf(stderr, __VA_ARGS__);                                                                          \
		fputc('\n', stderr);                                                                                   \
	} while (0)

static inline int
test_summary(void)
{
	printf("%d passed, %d failed, %d skipped\n", tl_pass, tl_fail, tl_skip);
	return tl_fail != 0;
}

/* The compute backend the engine tests run on: PRIVAI_TEST_DEVICE
 * ("cuda" in scripts/gpu-check.sh), else NULL, the CPU. */
static inline const char *
test_device(void)
{
	const char *d = getenv("PRIVAI_TEST_DEVICE");

	return d != NULL && d[0] != '\0' ? d : NULL;
}

/* Directory of the shared fixtures, or NULL (with a SKIP) when absent. */
static inline const char *
fixtures_dir(void)
{
	const char *d = getenv("PRIVAI_FIXTURES");
	struct stat st;

	if (d == NULL)
		d = "../shared/fixtures";
	if (stat(d, &st) != 0 || !S_ISDIR(st.st_mode)) {
		SKIP("no fixtures at %s (set PRIVAI_FIXTURES)", d);
		return NULL;
	}
	return d;
}

/* Read a whole file; *len set; NULL on failure.  Caller frees. */
static inline char *
read_file(const char *path, size_t *len)
{
	FILE *fp = fopen(path, "rb");
	char *buf;
	long sz;

	if (fp == NULL)
		return NULL;
	fseek(fp, 0, SEEK_END);
	sz = ftell(fp);
	fseek(fp, 0, SEEK_SET);
	buf = malloc((size_t)sz + 1);
	if (buf != NULL && fread(buf, 1, (size_t)sz, fp) != (size_t)sz) {
		free(buf);
		buf = NULL;
	}
	fclose(fp);
	if (buf != NULL) {
		buf[sz] = '\0';
		*len = (size_t)sz;
	}
	return buf;
}

#endif
