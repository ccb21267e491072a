/* SHA-256 (FIPS 180-4), for cache keys and payload checksums.  Internal. */
#ifndef S2C_SHA256_H
#define S2C_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct s2_sha256 {
    uint32_t h[8];
    uint64_t bytes;      /* message length so far */
    uint8_t block[64];
    size_t fill;         /* bytes waiting in block */
} s2_sha256;

void s2_sha256_init(s2_sha256 *s);
void s2_sha256_update(s2_sha256 *s, const void *data, size_t n);
void s2_sha256_final(s2_sha256 *s, uint8_t out[32]);
void s2_sha256_once(const void *data, size_t n, uint8_t out[32]);

#endif
