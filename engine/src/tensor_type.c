/*
 * The type table and the half-precision conversions everything else uses.
 */
#include <stdio.h>
#include <string.h>

#include "privai/tensor_type.h"

#define T(id, nm, be, bb, dq) [id] = { nm, be, bb, dq }
static const struct tensor_type_info type_table[TT_COUNT] = {
	T(TT_F32, "F32", 1, 4, 1),
	T(TT_F16, "F16", 1, 2, 1),
	T(TT_Q4_0, "Q4_0", 32, 18, 1),
	T(TT_Q4_1, "Q4_1", 32, 20, 1),
	T(TT_Q5_0, "Q5_0", 32, 22, 1),
	T(TT_Q5_1, "Q5_1", 32, 24, 1),
	T(TT_Q8_0, "Q8_0", 32, 34, 1),
	T(TT_Q8_1, "Q8_1", 32, 36, 0),
	T(TT_Q2_K, "Q2_K", 256, 84, 1),
	T(TT_Q3_K, "Q3_K", 256, 110, 1),
	T(TT_Q4_K, "Q4_K", 256, 144, 1),
	T(TT_Q5_K, "Q5_K", 256, 176, 1),
	T(TT_Q6_K, "Q6_K", 256, 210, 1),
	T(TT_Q8_K, "Q8_K", 256, 292, 0),
	T(TT_IQ2_XXS, "IQ2_XXS", 256, 66, 0),
	T(TT_IQ2_XS, "IQ2_XS", 256, 74, 0),
	T(TT_IQ3_XXS, "IQ3_XXS", 256, 98, 0),
	T(TT_IQ1_S, "IQ1_S", 256, 50, 0),
	T(TT_IQ4_NL, "IQ4_NL", 32, 18, 1),
	T(TT_IQ3_S, "IQ3_S", 256, 110, 0),
	T(TT_IQ2_S, "IQ2_S", 256, 82, 0),
	T(TT_IQ4_XS, "IQ4_XS", 256, 136, 1),
	T(TT_I8, "I8", 1, 1, 0),
	T(TT_I16, "I16", 1, 2, 0),
	T(TT_I32, "I32", 1, 4, 0),
	T(TT_I64, "I64", 1, 8, 0),
	T(TT_F64, "F64", 1, 8, 0),
	T(TT_IQ1_M, "IQ1_M", 256, 56, 0),
	T(TT_BF16, "BF16", 1, 2, 1),
	T(TT_TQ1_0, "TQ1_0", 256, 54, 0),
	T(TT_TQ2_0, "TQ2_0", 256, 66, 0),
	T(TT_MXFP4, "MXFP4", 32, 17, 0),
};
#undef T

const struct tensor_type_info *
tensor_type_get(uint32_t type)
{
	if (type >= TT_COUNT || type_table[type].name == NULL)
		return NULL;
	return &type_table[type];
}

const char *
tensor_type_name(uint32_t type)
{
	static _Thread_local char buf[24];
	const struct tensor_type_info *ti = tensor_type_get(type);

	if (ti != NULL)
		return ti->name;
	snprintf(buf, sizeof(buf), "type#%u", type);
	return buf;
}

size_t
tensor_type_row_bytes(uint32_t type, uint64_t n)
{
	const struct tensor_type_info *ti = tensor_type_get(type);

	if (ti == NULL || n % ti->block_elems != 0)
		return 0;
	return (size_t)(n / ti->block_elems) * ti->block_bytes;
}

float
fp16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
	float f;

	if (exp == 0x1f) {
		bits = sign | 0x7f800000 | (mant << 13);
	} else if (exp != 0) {
		bits = sign | ((exp + 112) << 23) | (mant << 13);
	} else if (mant == 0) {
		bits = sign;
	} else {
		/* subnormal half: renormalise */
		exp = 113;
		while ((mant & 0x400) == 0) {
			mant <<= 1;
			exp--;
		}
		bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
	}
	memcpy(&f, &bits, 4);
	return f;
}

uint16_t
f32_to_fp16(float f)
{
	uint32_t x, sign, mant;
	int32_t exp;

	memcpy(&x, &f, 4);
	sign = (x >> 16) & 0x8000;
	exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
	mant = x & 0x7fffff;
	if (((x >> 23) & 0xff) == 0xff)
		return (uint16_t)(sign | 0x7c00 | (mant ? 0x200 : 0));
	if (exp >= 31)
		return (uint16_t)(sign | 0x7c00);
	if (exp <= 0) {
		if (exp < -10)
			return (uint16_t)sign;
		mant |= 0x800000;
		uint32_t shift = (uint32_t)(14 - exp);
		uint32_t half = mant >> shift;
		uint32_t rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
		if (rem > mid || (rem == mid && (half & 1)))
			half++;
		return (uint16_t)(sign | half);
	}
	uint32_t h = sign | ((uint32_t)exp << 10) | (mant >> 13);
	uint32_t rem = mant & 0x1fff;
	if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
		h++; /* a carry into the exponent is the right answer */
	return (uint16_t)h;
}

float
bf16_to_f32(uint16_t h)
{
	uint32_t bits = (uint32_t)h << 16;
	float f;

	memcpy(&f, &bits, 4);
	return f;
}

uint16_t
f32_to_bf16(float f)
{
	uint32_t x;

	memcpy(&x, &f, 4);
	if ((x & 0x7fffffff) > 0x7f800000)
		return (uint16_t)((x >> 16) | 64); /* quiet NaN */
	return (uint16_t)((x + (0x7fff + ((x >> 16) & 1))) >> 16);
}
