#ifndef PRIVAI_DEMO_VOCAB_H
#define PRIVAI_DEMO_VOCAB_H

#include "privai/gguf.h"

/* Write the demo tokenizer's metadata, padded with unused tokens to at
 * least min_vocab entries; *ret_n_vocab gets the size.  0 or -1. */
int demo_vocab_write(struct gguf_writer *w, int min_vocab, int *ret_n_vocab);

#endif
