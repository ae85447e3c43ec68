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
__attribute__((target("sse4.2"))) static uint32_t crc32c_hard(const unsigned char *p, Py_ssize_t n) {
    uint64_t c = 0xFFFFFFFFu;
    Py_ssize_t i = 0;
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
