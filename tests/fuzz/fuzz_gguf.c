/*
 * libFuzzer harness for the GGUF reader and everything that reads a model's
 * metadata: any input must give an error or a model, never a crash, an
 * out-of-bounds read or a leak (built with ASan + UBSan).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "privai/gguf.h"
#include "privai/model.h"
#include "privai/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[PRIVAI_ERR_LEN];
	struct gguf_file *f = NULL;
	struct engine_model *m = NULL;
	struct tokenizer *t = NULL;

	if (gguf_open_buffer(data, size, &f, err) < 0)
		return 0;
	if (tokenizer_load(f, &t, err) == 0) {
		int32_t *ids = NULL;
		int n = 0;
		if (tokenizer_encode(t, "Hello world, ünïcode 🚀", 26, 1, 1, &ids, &n, err) == 0) {
			char buf[64];
			for (int i = 0; i < n; i++)
				tokenizer_piece(t, ids[i], 1, buf, sizeof(buf));
		}
		free(ids);
		tokenizer_free(t);
	}
	if (engine_model_from_gguf(f, &m, err) == 0)
		engine_model_free(m); /* frees f too */
	else
		gguf_close(f);
	return 0;
}
