/*
 * oneDNN's bfloat16 matmul, loaded with dlopen() on first use.
 *
 * Why dlopen and not a link: Debian's oneDNN runs on OpenMP, and libgomp
 * reads its environment once, when it is loaded.  Its default wait policy
 * keeps idle threads spinning after every parallel region, which on shared
 * CPUs takes them from our own pool's threads (the attention and norms run
 * there between two matmuls) and from the other engines on the machine.
 * Loading it ourselves lets OMP_WAIT_POLICY default to PASSIVE first (an
 * operator's own setting still wins); and an engine without the library
 * keeps working, on its own kernels.
 *
 * A matmul is built for its exact shape each call: oneDNN caches the
 * compiled kernel by shape (a hit costs about 2 us, a miss some 0.4 ms,
 * once per shape), and its kernels for a fixed token count are faster than
 * those for a count given at run time.  Batches are cut into near-equal
 * chunks of at most ONEDNN_CHUNK tokens so that the shapes stay few
 * (rows x cols x 1..ONEDNN_CHUNK) and within the cache.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#include "cpu_onednn.h"
#include "under_asan.h"

#define ONEDNN_LIB "libdnnl.so.2" /* the 2.x C API: matmul descriptors */

#define ONEDNN_CHUNK 128

static struct {
	__typeof__(dnnl_engine_create) *engine_create;
	__typeof__(dnnl_stream_create) *stream_create;
	__typeof__(dnnl_stream_destroy) *stream_destroy;
	__typeof__(dnnl_memory_desc_init_by_tag) *md_init;
	__typeof__(dnnl_matmul_desc_init) *matmul_init;
	__typeof__(dnnl_primitive_desc_create) *pd_create;
	__typeof__(dnnl_primitive_desc_query) *pd_query;
	__typeof__(dnnl_primitive_desc_destroy) *pd_destroy;
	__typeof__(dnnl_primitive_create) *prim_create;
	__typeof__(dnnl_primitive_destroy) *prim_destroy;
	__typeof__(dnnl_primitive_execute) *execute;
	__typeof__(dnnl_memory_create) *mem_create;
	__typeof__(dnnl_memory_destroy) *mem_destroy;
	__typeof__(dnnl_stream_wait) *stream_wait;
	__typeof__(dnnl_version) *version;
	void (*omp_set_num_threads)(int);

	dnnl_engine_t engine;
	char impl[64];    /* what a bfloat16 matmul runs on: non-empty when usable */
	char status[192]; /* for `features` */
} dn;

static pthread_once_t dn_once = PTHREAD_ONCE_INIT;

/* A bfloat16 matmul of m tokens, rows x cols weights: its memory
 * descriptors (source, weights, destination) in md.  Returns the primitive
 * descriptor or NULL. */
static dnnl_primitive_desc_t
matmul_pd(int64_t m, int64_t rows, int64_t cols, dnnl_memory_desc_t md[3])
{
	dnnl_matmul_desc_t mm;
	dnnl_primitive_desc_t pd;
	dnnl_dims_t sd = { m, cols }, wd = { cols, rows }, dd = { m, rows };

	/* the weights are rows x cols row major: cols x rows with strides
	 * (1, cols), oneDNN's "ba", read in place */
	if (dn.md_init(&md[0], 2, sd, dnnl_bf16, dnnl_ab) != dnnl_success ||
	    dn.md_init(&md[1], 2, wd, dnnl_bf16, dnnl_ba) != dnnl_success ||
	    dn.md_init(&md[2], 2, dd, dnnl_f32, dnnl_ab) != dnnl_success ||
	    dn.matmul_init(&mm, &md[0], &md[1], NULL, &md[2]) != dnnl_success ||
	    dn.pd_create(&pd, &mm, NULL, dn.engine, NULL) != dnnl_success)
		return NULL;
	return pd;
}

#define SYM(field, name)                                                                                               \
	do {                                                                                                           \
		if ((*(void **)&dn.field = dlsym(h, name)) == NULL) {                                                  \
			snprintf(dn.status, sizeof(dn.status), "not used: %s lacks %s", ONEDNN_LIB, name);             \
			return;                                                                                        \
		}                                                                                                      \
	} while (0)

static void
dn_load(void)
{
	const char *off = getenv("PRIVAI_ONEDNN");
	void *h;

	if (off != NULL && strcmp(off, "0") == 0) {
		snprintf(dn.status, sizeof(dn.status), "not used: PRIVAI_ONEDNN=0");
		return;
	}
#ifdef PRIVAI_UNDER_ASAN
	/* LeakSanitizer's exit check crashes stopping libgomp's threads */
	snprintf(dn.status, sizeof(dn.status),
		 "not used: an AddressSanitizer build (its leak check cannot stop OpenMP's threads)");
	return;
#endif
	setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
	if ((h = dlopen(ONEDNN_LIB, RTLD_NOW | RTLD_LOCAL)) == NULL) {
		snprintf(dn.status, sizeof(dn.status), "not used: %s", dlerror());
		return;
	}
	SYM(engine_create, "dnnl_engine_create");
	SYM(stream_create, "dnnl_stream_create");
	SYM(stream_destroy, "dnnl_stream_destroy");
	SYM(md_init, "dnnl_memory_desc_init_by_tag");
	SYM(matmul_init, "dnnl_matmul_desc_init");
	SYM(pd_create, "dnnl_primitive_desc_create");
	SYM(pd_query, "dnnl_primitive_desc_query");
	SYM(pd_destroy, "dnnl_primitive_desc_destroy");
	SYM(prim_create, "dnnl_primitive_create");
	SYM(prim_destroy, "dnnl_primitive_destroy");
	SYM(execute, "dnnl_primitive_execute");
	SYM(mem_create, "dnnl_memory_create");
	SYM(mem_destroy, "dnnl_memory_destroy");
	SYM(stream_wait, "dnnl_stream_wait");
	SYM(version, "dnnl_version");
	SYM(omp_set_num_threads, "omp_set_num_threads"); /* libgomp, a dependency of the handle */

	const dnnl_version_t *v = dn.version();
	if (dn.engine_create(&dn.engine, dnnl_cpu, 0) != dnnl_success) {
		snprintf(dn.status, sizeof(dn.status), "not used: oneDNN %d.%d.%d has no CPU engine", v->major,
			 v->minor, v->patch);
		return;
	}
	/* ask for a typical prefill shape and keep the answer only when it
	 * is real code for this CPU: the reference loops are far slower than
	 * our own GEMM */
	dnnl_memory_desc_t md[3];
	dnnl_primitive_desc_t pd = matmul_pd(32, 256, 256, md);
	const char *impl = NULL;
	if (pd == NULL || dn.pd_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || impl == NULL) {
		snprintf(dn.status, sizeof(dn.status), "not used: oneDNN %d.%d.%d has no bfloat16 matmul here",
			 v->major, v->minor, v->patch);
	} else if (strncmp(impl, "ref", 3) == 0) {
		snprintf(dn.status, sizeof(dn.status), "not used: oneDNN %d.%d.%d has only its reference matmul (%s)",
			 v->major, v->minor, v->patch, impl);
	} else {
		snprintf(dn.impl, sizeof(dn.impl), "%s", impl);
		snprintf(dn.status, sizeof(dn.status), "oneDNN %d.%d.%d available, bfloat16 matmul on %s", v->major,
			 v->minor, v->patch, dn.impl);
	}
	if (pd != NULL)
		dn.pd_destroy(pd);
}

const char *
cpu_onednn_bf16(void)
{
	pthread_once(&dn_once, dn_load);
	return dn.impl[0] != '\0' ? dn.impl : NULL;
}

int
cpu_onednn_forced(void)
{
	const char *on = getenv("PRIVAI_ONEDNN");

	return on != NULL && strcmp(on, "1") == 0;
}

const char *
cpu_onednn_status(void)
{
	pthread_once(&dn_once, dn_load);
	return dn.status;
}

/* One chunk: m tokens from x into y. */
static int
matmul_chunk(dnnl_stream_t s, const uint16_t *w, int64_t rows, int64_t cols, const uint16_t *x, int64_t m, float *y)
{
	dnnl_memory_desc_t md[3];
	dnnl_primitive_desc_t pd = matmul_pd(m, rows, cols, md);
	dnnl_primitive_t p = NULL;
	dnnl_memory_t mem[3] = { NULL, NULL, NULL };
	int r = -1;

	if (pd == NULL)
		return -1;
	/* oneDNN takes non-const handles; it only reads the source and weights */
	if (dn.prim_create(&p, pd) == dnnl_success &&
	    dn.mem_create(&mem[0], &md[0], dn.engine, (void *)x) == dnnl_success &&
	    dn.mem_create(&mem[1], &md[1], dn.engine, (void *)w) == dnnl_success &&
	    dn.mem_create(&mem[2], &md[2], dn.engine, y) == dnnl_success) {
		dnnl_exec_arg_t args[3] = {
			{ DNNL_ARG_SRC, mem[0] },
			{ DNNL_ARG_WEIGHTS, mem[1] },
			{ DNNL_ARG_DST, mem[2] },
		};
		if (dn.execute(p, s, 3, args) == dnnl_success && dn.stream_wait(s) == dnnl_success)
			r = 0;
	}
	for (int i = 0; i < 3; i++)
		if (mem[i] != NULL)
			dn.mem_destroy(mem[i]);
	if (p != NULL)
		dn.prim_destroy(p);
	dn.pd_destroy(pd);
	return r;
}

int
cpu_onednn_matmul_bf16(const uint16_t *w, int64_t rows, int64_t cols, const uint16_t *x, int n, float *y, int n_threads)
{
	dnnl_stream_t s;
	int chunks = (n + ONEDNN_CHUNK - 1) / ONEDNN_CHUNK, r = 0;

	if (dn.stream_create(&s, dn.engine, dnnl_stream_default_flags) != dnnl_success)
		return -1;
	/* per calling thread in OpenMP: set it on every call, it is cheap */
	dn.omp_set_num_threads(n_threads);
	for (int c = 0, t0 = 0; c < chunks && r == 0; c++) {
		int t1 = (int)((int64_t)n * (c + 1) / chunks);
		r = matmul_chunk(s, w, rows, cols, x + (int64_t)t0 * cols, t1 - t0, y + (int64_t)t0 * rows);
		t0 = t1;
	}
	dn.stream_destroy(s);
	return r;
}
