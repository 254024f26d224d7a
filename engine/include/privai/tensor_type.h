/*
 * Tensor element types as the GGUF ecosystem numbers them, their block
 * layouts, and conversion between them and float32.
 *
 * A quantized type stores `block_elems` values in `block_bytes` bytes; a row
 * of a tensor is always a whole number of blocks.  Dequantization follows the
 * reference definitions bit for bit, so a weight read here equals the weight
 * every other GGUF reader sees.
 */
#ifndef PRIVAI_TENSOR_TYPE_H
#define PRIVAI_TENSOR_TYPE_H

#include <stddef.h>
#include <stdint.h>

enum tensor_type {
	TT_F32 = 0,
	TT_F16 = 1,
	TT_Q4_0 = 2,
	TT_Q4_1 = 3,
	TT_Q5_0 = 6,
	TT_Q5_1 = 7,
	TT_Q8_0 = 8,
	TT_Q8_1 = 9,
	TT_Q2_K = 10,
	TT_Q3_K = 11,
	TT_Q4_K = 12,
	TT_Q5_K = 13,
	TT_Q6_K = 14,
	TT_Q8_K = 15,
	TT_IQ2_XXS = 16,
	TT_IQ2_XS = 17,
	TT_IQ3_XXS = 18,
	TT_IQ1_S = 19,
	TT_IQ4_NL = 20,
	TT_IQ3_S = 21,
	TT_IQ2_S = 22,
	TT_IQ4_XS = 23,
	TT_I8 = 24,
	TT_I16 = 25,
	TT_I32 = 26,
	TT_I64 = 27,
	TT_F64 = 28,
	TT_IQ1_M = 29,
	TT_BF16 = 30,
	TT_TQ1_0 = 34,
	TT_TQ2_0 = 35,
	TT_MXFP4 = 39,
	TT_COUNT = 40
};

#define QK_K 256 /* elements in a k-quant super-block */

struct tensor_type_info {
	const char *name;     /* "Q4_K"; NULL for ids no format ever used */
	uint32_t block_elems; /* values per block */
	uint32_t block_bytes; /* bytes per block */
	int can_dequant;      /* this engine can turn it into float32 */
};

/* Traits of type id `type`, or NULL when the id is unknown. */
const struct tensor_type_info *tensor_type_get(uint32_t type);

/* Name of a type id for messages ("Q4_K", or "type#77" when unknown). */
const char *tensor_type_name(uint32_t type);

/* Bytes of one row of `n` elements; 0 when n is not a whole number of
 * blocks or the type is unknown. */
size_t tensor_type_row_bytes(uint32_t type, uint64_t n);

/* Dequantize `n` elements (a whole number of blocks) from `src` into `dst`.
 * Returns 0, or -1 when the type cannot be dequantized. */
int tensor_dequantize_row(uint32_t type, const void *src, float *dst, size_t n);

/* Quantize `n` float32 values (a whole number of blocks) into `dst`.
 * Supported targets: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K.
 * Returns 0, or -1 for any other target type. */
int tensor_quantize_row(uint32_t type, const float *src, void *dst, size_t n);

/* Quantize a rows x cols float matrix into a fresh buffer (*ret_data,
 * *ret_bytes; caller frees).  PRIVAI_EINVAL when cols is not a whole
 * number of blocks or the type has no quantizer, PRIVAI_ENOMEM. */
int tensor_quantize_matrix(uint32_t type, const float *src, int64_t rows, int64_t cols, void **ret_data,
			   size_t *ret_bytes);

/* IEEE half and bfloat16 conversions (round to nearest even). */
float fp16_to_f32(uint16_t h);
uint16_t f32_to_fp16(float f);
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);

#endif
