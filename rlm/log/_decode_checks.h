/*
 * The two checks rlm.log._decode makes of bytes besides their layout: the CRC-32C of a v2 batch
 * (as the crc32c package computes it) and strict UTF-8 (as Python's decoder accepts it).
 */
#ifndef RLM_DECODE_CHECKS_H
#define RLM_DECODE_CHECKS_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

/* -- CRC-32C (Castagnoli), as the crc32c package computes it ----------------------------------- */

static uint32_t crc_table[256];

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) {
            c = (c >> 1) ^ (0x82F63B78u & -(c & 1u));
        }
        crc_table[i] = c;
    }
}

static uint32_t crc32c_soft(const unsigned char *p, Py_ssize_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (Py_ssize_t i = 0; i < n; i++) {
        c = crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    }
    return ~c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_CRC_INSTRUCTION 1

/* The register after n zero bytes from c (no conditioning): linear in c. */
static uint32_t crc_zeros(uint32_t c, int n) {
    for (int i = 0; i < n; i++) {
        c = crc_table[c & 0xFF] ^ (c >> 8);
    }
    return c;
}

/* Three lanes of CRC_SHORT (or CRC_LONG) bytes each are CRC'd side by side and joined: the
 * register after a lane is shifted over the next lane's length by crc_short (crc_long): for each
 * byte k of the register, the register that byte alone becomes after that many zero bytes. */
#define CRC_SHORT 256
#define CRC_LONG 4096
static uint32_t crc_short[4][256], crc_long[4][256];

static inline uint32_t crc_shift(const uint32_t table[4][256], uint32_t c) {
    return table[0][c & 0xFF] ^ table[1][(c >> 8) & 0xFF] ^ table[2][(c >> 16) & 0xFF] ^ table[3][c >> 24];
}

static void crc_shift_init(void) {
    for (int k = 0; k < 4; k++) {
        for (uint32_t b = 0; b < 256; b++) {
            crc_short[k][b] = crc_zeros(b << (8 * k), CRC_SHORT);
        }
    }
    for (int k = 0; k < 4; k++) {
        for (uint32_t b = 0; b < 256; b++) {
            uint32_t c = b << (8 * k);
            for (int i = 0; i < CRC_LONG / CRC_SHORT; i++) {
                c = crc_shift(crc_short, c);
            }
            crc_long[k][b] = c;
        }
    }
}

/* The register after 3 * len bytes at p from c, the three lanes of len bytes interleaved (the
 * instruction's latency is three times its throughput). */
__attribute__((target("sse4.2"))) static inline uint64_t crc32c_lanes(uint64_t c, const unsigned char *p,
                                                                       Py_ssize_t len,
                                                                       const uint32_t table[4][256]) {
    uint64_t c1 = 0, c2 = 0;
    for (Py_ssize_t i = 0; i < len; i += 8) {
        uint64_t w0, w1, w2;
        memcpy(&w0, p + i, 8);
        memcpy(&w1, p + len + i, 8);
        memcpy(&w2, p + 2 * len + i, 8);
        c = __builtin_ia32_crc32di(c, w0);
        c1 = __builtin_ia32_crc32di(c1, w1);
        c2 = __builtin_ia32_crc32di(c2, w2);
    }
    c = crc_shift(table, (uint32_t)c) ^ (uint32_t)c1;
    return crc_shift(table, (uint32_t)c) ^ (uint32_t)c2;
}

__attribute__((target("sse4.2"))) static uint32_t crc32c_hard(const unsigned char *p, Py_ssize_t n) {
    uint64_t c = 0xFFFFFFFFu;
    Py_ssize_t i = 0;
    for (; n - i >= 3 * CRC_LONG; i += 3 * CRC_LONG) {
        c = crc32c_lanes(c, p + i, CRC_LONG, crc_long);
    }
    for (; n - i >= 3 * CRC_SHORT; i += 3 * CRC_SHORT) {
        c = crc32c_lanes(c, p + i, CRC_SHORT, crc_short);
    }
    for (; i + 8 <= n; i += 8) {
        uint64_t word;
        memcpy(&word, p + i, 8);
        c = __builtin_ia32_crc32di(c, word);
    }
    uint32_t c32 = (uint32_t)c;
    for (; i < n; i++) {
        c32 = __builtin_ia32_crc32qi(c32, p[i]);
    }
    return ~c32;
}
#endif

static int use_crc_instruction = 0;

static uint32_t crc32c(const unsigned char *p, Py_ssize_t n) {
#ifdef HAVE_CRC_INSTRUCTION
    if (use_crc_instruction) {
        return crc32c_hard(p, n);
    }
#endif
    return crc32c_soft(p, n);
}

/* Strict UTF-8, as Python's decoder accepts it: no overlong forms, no surrogates, <= U+10FFFF. */
static int valid_utf8(const unsigned char *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int extra;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) {
            extra = 1;
            cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            extra = 2;
            cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            extra = 3;
            cp = c & 0x07;
        } else {
            return 0;
        }
        if (n - i <= extra) {
            return 0;
        }
        for (int k = 1; k <= extra; k++) {
            unsigned char cc = s[i + k];
            if ((cc & 0xC0) != 0x80) {
                return 0;
            }
            cp = (cp << 6) | (cc & 0x3F);
        }
        if ((extra == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
            (extra == 3 && (cp < 0x10000 || cp > 0x10FFFF))) {
            return 0;
        }
        i += extra + 1;
    }
    return 1;
}

#endif
