/*
 * PRIVAI_UNDER_ASAN is defined in a build with AddressSanitizer, by gcc's
 * macro or clang's feature test, for the few places that do otherwise
 * there (what ASan cannot see into, or cannot stop cleanly).
 */
#ifndef PRIVAI_KERNELS_UNDER_ASAN_H
#define PRIVAI_KERNELS_UNDER_ASAN_H

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PRIVAI_UNDER_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(PRIVAI_UNDER_ASAN)
#define PRIVAI_UNDER_ASAN 1
#endif

#endif
