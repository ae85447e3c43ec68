/*
 * rlm.stream._ndjson: NDJSON lines of a range stream, written in C from the column decoder's
 * buffers (rlm.log.columns.ColumnBuffers).
 *
 * The lines are defined by the pure-Python reference (rlm/stream/ndjson.py): this only writes the
 * same bytes faster. It never reports a problem itself: on anything not plainly consistent (a
 * buffer shorter than its used length, offsets that go backwards or past their data, a header key
 * that is not UTF-8, row spans that do not cover the rows) it raises ValueError and the reference
 * writes the lines instead. The buffers are held (their size cannot change) while the lines are
 * written without the GIL.
 *
 * Base64 takes most of a line's bytes: on x86-64 it is written in vector registers, 24 input bytes
 * at a time with AVX2 and 12 with SSSE3 (whichever the CPU has, checked when the module loads; AVX2
 * takes a value's base64 in about half the time of SSSE3), the rest of each value a 3-byte group at
 * a time through a table of character pairs; the output is the same either way. ``wide_base64``
 * picks a narrower path (for the tests, which write the same values through each).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../log/_columns.h"

typedef struct {
    const unsigned char *at[NCOL];
    int64_t used[NCOL];
} columns_t;

typedef struct {
    int64_t end; /* rows before this span ends */
    int64_t epoch;
    const char *kind;
    Py_ssize_t kind_len;
} span_t;

static int64_t le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) {
        v = (v << 8) | p[i];
    }
    return (int64_t)v;
}

static int32_t le32(const unsigned char *p) {
    return (int32_t)((uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24));
}

static int32_t end_at(const columns_t *c, int column, int64_t i) {
    return le32(c->at[column] + 4 * i);
}

static int valid_at(const columns_t *c, int column, int64_t i) {
    return (c->at[column][i >> 3] >> (i & 7)) & 1;
}

/* Whether an offsets column holds count + 1 non-decreasing offsets from 0 into data. */
static int offsets_fit(const columns_t *c, int offsets, int data, int64_t count) {
    if (c->used[offsets] != 4 * (count + 1) || end_at(c, offsets, 0) != 0) {
        return 0;
    }
    for (int64_t i = 0; i < count; i++) {
        if (end_at(c, offsets, i + 1) < end_at(c, offsets, i)) {
            return 0;
        }
    }
    return data < 0 || end_at(c, offsets, count) <= c->used[data];
}

static int64_t base64_len(int64_t n) {
    return 4 * ((n + 2) / 3);
}

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static const char HEX[] = "0123456789abcdef";
/* The two base64 characters of each 12-bit value (filled when the module loads). */
static char B64_PAIRS[4096][2];

static void fill_pairs(void) {
    for (int v = 0; v < 4096; v++) {
        B64_PAIRS[v][0] = B64[v >> 6];
        B64_PAIRS[v][1] = B64[v & 63];
    }
}

static char *put(char *out, const char *s, size_t n) {
    memcpy(out, s, n);
    return out + n;
}

#define PUT_LITERAL(out, s) put((out), (s), sizeof(s) - 1)

static char *put_int(char *out, int64_t value) {
    char digits[24];
    int n = 0;
    uint64_t u = value < 0 ? (uint64_t)0 - (uint64_t)value : (uint64_t)value;
    do {
        digits[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (value < 0) {
        *out++ = '-';
    }
    while (n) {
        *out++ = digits[--n];
    }
    return out;
}

/* The base64 of d[0, n) for n a multiple of 3, four characters per three bytes. */
static char *put_base64_whole(char *out, const unsigned char *d, int64_t n) {
    for (int64_t i = 0; i + 3 <= n; i += 3) {
        uint32_t v = ((uint32_t)d[i] << 16) | ((uint32_t)d[i + 1] << 8) | d[i + 2];
        memcpy(out, B64_PAIRS[v >> 12], 2);
        memcpy(out + 2, B64_PAIRS[v & 4095], 2);
        out += 4;
    }
    return out;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_SSSE3_PATH 1

/* The base64 of the first 12 bytes of each 16 read (d[i, i + 16) must be readable), 16 characters
 * at a time, for as many whole 12-byte groups as leave 4 bytes to read after them: the bytes done.
 * Each 3 bytes are spread to 4 lanes of 6 bits (the shuffle puts bytes b1 b0 b2 b1 in a 32-bit
 * lane; the multiplies shift each 6-bit field into its own byte), then each 6-bit value is mapped
 * to its character by adding the offset of its range (A-Z, a-z, 0-9, +, /), looked up by shuffle. */
__attribute__((target("ssse3"))) static int64_t put_base64_ssse3(char **out, const unsigned char *d, int64_t n) {
    const __m128i spread = _mm_set_epi8(10, 11, 9, 10, 7, 8, 6, 7, 4, 5, 3, 4, 1, 2, 0, 1);
    const __m128i offsets = _mm_setr_epi8(65, 71, -4, -4, -4, -4, -4, -4, -4, -4, -4, -4, -19, -16, 0, 0);
    int64_t i = 0;
    char *o = *out;
    for (; i + 16 <= n; i += 12) {
        __m128i in = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(d + i)), spread);
        __m128i hi = _mm_mulhi_epu16(_mm_and_si128(in, _mm_set1_epi32(0x0fc0fc00)), _mm_set1_epi32(0x04000040));
        __m128i lo = _mm_mullo_epi16(_mm_and_si128(in, _mm_set1_epi32(0x003f03f0)), _mm_set1_epi32(0x01000010));
        __m128i six = _mm_or_si128(hi, lo);
        /* 0 for 0-25 (A-Z), 1 for 26-51 (a-z), 2-11 for 52-61 (digits), 12 for 62, 13 for 63 */
        __m128i range = _mm_subs_epu8(six, _mm_set1_epi8(51));
        range = _mm_sub_epi8(range, _mm_cmpgt_epi8(six, _mm_set1_epi8(25)));
        _mm_storeu_si128((__m128i *)o, _mm_add_epi8(six, _mm_shuffle_epi8(offsets, range)));
        o += 16;
    }
    *out = o;
    return i;
}

/* put_base64_ssse3 on two groups of 12 bytes at once, one in each 128-bit lane (each lane loaded
 * from its own 16 bytes: d[i, i + 28) must be readable), 32 characters at a time. */
__attribute__((target("avx2"))) static int64_t put_base64_avx2(char **out, const unsigned char *d, int64_t n) {
    const __m256i spread = _mm256_setr_epi8(1, 0, 2, 1, 4, 3, 5, 4, 7, 6, 8, 7, 10, 9, 11, 10, 1, 0, 2, 1, 4, 3, 5,
                                            4, 7, 6, 8, 7, 10, 9, 11, 10);
    const __m256i offsets = _mm256_setr_epi8(65, 71, -4, -4, -4, -4, -4, -4, -4, -4, -4, -4, -19, -16, 0, 0, 65, 71,
                                             -4, -4, -4, -4, -4, -4, -4, -4, -4, -4, -19, -16, 0, 0);
    int64_t i = 0;
    char *o = *out;
    for (; i + 28 <= n; i += 24) {
        __m256i in = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(d + i))),
                                             _mm_loadu_si128((const __m128i *)(d + i + 12)), 1);
        in = _mm256_shuffle_epi8(in, spread);
        __m256i hi = _mm256_mulhi_epu16(_mm256_and_si256(in, _mm256_set1_epi32(0x0fc0fc00)),
                                        _mm256_set1_epi32(0x04000040));
        __m256i lo = _mm256_mullo_epi16(_mm256_and_si256(in, _mm256_set1_epi32(0x003f03f0)),
                                        _mm256_set1_epi32(0x01000010));
        __m256i six = _mm256_or_si256(hi, lo);
        __m256i range = _mm256_subs_epu8(six, _mm256_set1_epi8(51));
        range = _mm256_sub_epi8(range, _mm256_cmpgt_epi8(six, _mm256_set1_epi8(25)));
        _mm256_storeu_si256((__m256i *)o, _mm256_add_epi8(six, _mm256_shuffle_epi8(offsets, range)));
        o += 32;
    }
    *out = o;
    return i;
}

/* The widest vector path of the CPU: 0 none, 1 SSSE3, 2 AVX2; use_wide, the one in use. */
static int widest = 0;
static int use_wide = 0;

static void pick_base64(void) {
    __builtin_cpu_init();
    widest = __builtin_cpu_supports("avx2") ? 2 : __builtin_cpu_supports("ssse3") ? 1 : 0;
    use_wide = widest;
}
#else
static const int use_wide = 0;
static void pick_base64(void) {}
#endif

/* A value as JSON: base64 in quotes, or null. */
static char *put_blob(char *out, const unsigned char *d, int64_t n, int valid) {
    if (!valid) {
        return PUT_LITERAL(out, "null");
    }
    *out++ = '"';
    int64_t i = 0;
#ifdef HAVE_SSSE3_PATH
    if (use_wide == 2 && n >= 28) {
        i = put_base64_avx2(&out, d, n);
    }
    if (use_wide >= 1 && n - i >= 16) {
        i += put_base64_ssse3(&out, d + i, n - i);
    }
#endif
    out = put_base64_whole(out, d + i, (n - i) / 3 * 3);
    i += (n - i) / 3 * 3;
    if (n - i == 1) {
        uint32_t v = (uint32_t)d[i] << 16;
        out = put(out, (char[]){B64[v >> 18], B64[(v >> 12) & 63], '=', '='}, 4);
    } else if (n - i == 2) {
        uint32_t v = ((uint32_t)d[i] << 16) | ((uint32_t)d[i + 1] << 8);
        out = put(out, (char[]){B64[v >> 18], B64[(v >> 12) & 63], B64[(v >> 6) & 63], '='}, 4);
    }
    *out++ = '"';
    return out;
}

static char *put_u_escape(char *out, uint32_t unit) {
    out[0] = '\\';
    out[1] = 'u';
    out[2] = HEX[(unit >> 12) & 15];
    out[3] = HEX[(unit >> 8) & 15];
    out[4] = HEX[(unit >> 4) & 15];
    out[5] = HEX[unit & 15];
    return out + 6;
}

/* The code point of the UTF-8 sequence at d[*i] (strict, as Python decodes), or -1. */
static int32_t next_code_point(const unsigned char *d, int64_t n, int64_t *i) {
    unsigned char b = d[*i];
    int32_t cp;
    int more;
    if (b < 0x80) {
        *i += 1;
        return b;
    } else if (b >= 0xC2 && b <= 0xDF) {
        cp = b & 0x1F;
        more = 1;
    } else if (b >= 0xE0 && b <= 0xEF) {
        cp = b & 0x0F;
        more = 2;
    } else if (b >= 0xF0 && b <= 0xF4) {
        cp = b & 0x07;
        more = 3;
    } else {
        return -1;
    }
    if (*i + more >= n) {
        return -1;
    }
    for (int k = 1; k <= more; k++) {
        unsigned char c = d[*i + k];
        if ((c & 0xC0) != 0x80) {
            return -1;
        }
        cp = (cp << 6) | (c & 0x3F);
    }
    if ((more == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
        (more == 3 && (cp < 0x10000 || cp > 0x10FFFF))) {
        return -1;
    }
    *i += 1 + more;
    return cp;
}

/* A UTF-8 string as json.dumps writes it (ensure_ascii), or NULL when it is not UTF-8. */
static char *put_json_string(char *out, const unsigned char *d, int64_t n) {
    *out++ = '"';
    int64_t i = 0;
    while (i < n) {
        int32_t cp = next_code_point(d, n, &i);
        if (cp < 0) {
            return NULL;
        }
        if (cp >= ' ' && cp <= '~' && cp != '\\' && cp != '"') {
            *out++ = (char)cp;
            continue;
        }
        switch (cp) {
        case '\\':
            out = PUT_LITERAL(out, "\\\\");
            break;
        case '"':
            out = PUT_LITERAL(out, "\\\"");
            break;
        case '\b':
            out = PUT_LITERAL(out, "\\b");
            break;
        case '\f':
            out = PUT_LITERAL(out, "\\f");
            break;
        case '\n':
            out = PUT_LITERAL(out, "\\n");
            break;
        case '\r':
            out = PUT_LITERAL(out, "\\r");
            break;
        case '\t':
            out = PUT_LITERAL(out, "\\t");
            break;
        default:
            if (cp >= 0x10000) {
                uint32_t v = (uint32_t)cp - 0x10000;
                out = put_u_escape(out, 0xD800 | (v >> 10));
                out = put_u_escape(out, 0xDC00 | (v & 0x3FF));
            } else {
                out = put_u_escape(out, (uint32_t)cp);
            }
        }
    }
    *out++ = '"';
    return out;
}

static char *put_blob_at(char *out, const columns_t *c, int offsets, int data, int validity, int64_t i) {
    int32_t from = end_at(c, offsets, i), to = end_at(c, offsets, i + 1);
    return put_blob(out, c->at[data] + from, to - from, valid_at(c, validity, i));
}

/* The lines of rows [0, rows) into out (room enough); NULL when a header key is not UTF-8. */
static char *write_lines(char *out, const columns_t *c, const span_t *spans, Py_ssize_t n_spans) {
    int64_t row = 0;
    for (Py_ssize_t s = 0; s < n_spans; s++) {
        const span_t *span = &spans[s];
        for (; row < span->end; row++) {
            out = PUT_LITERAL(out, "{\"offset\":");
            out = put_int(out, le64(c->at[C_OFFSET] + 8 * row));
            out = PUT_LITERAL(out, ",\"timestamp\":");
            out = put_int(out, le64(c->at[C_TIMESTAMP] + 8 * row));
            out = PUT_LITERAL(out, ",\"timestamp_type\":\"");
            out = put(out, span->kind, (size_t)span->kind_len);
            out = PUT_LITERAL(out, "\",\"key\":");
            out = put_blob_at(out, c, C_KEY_OFFSETS, C_KEY_DATA, C_KEY_VALIDITY, row);
            out = PUT_LITERAL(out, ",\"value\":");
            out = put_blob_at(out, c, C_VALUE_OFFSETS, C_VALUE_DATA, C_VALUE_VALIDITY, row);
            out = PUT_LITERAL(out, ",\"headers\":[");
            int32_t first = end_at(c, C_HEADER_OFFSETS, row), last = end_at(c, C_HEADER_OFFSETS, row + 1);
            for (int32_t h = first; h < last; h++) {
                if (h > first) {
                    *out++ = ',';
                }
                *out++ = '[';
                int32_t from = end_at(c, C_HKEY_OFFSETS, h), to = end_at(c, C_HKEY_OFFSETS, h + 1);
                out = put_json_string(out, c->at[C_HKEY_DATA] + from, to - from);
                if (out == NULL) {
                    return NULL;
                }
                *out++ = ',';
                out = put_blob_at(out, c, C_HVALUE_OFFSETS, C_HVALUE_DATA, C_HVALUE_VALIDITY, h);
                *out++ = ']';
            }
            out = PUT_LITERAL(out, "],\"leader_epoch\":");
            out = put_int(out, span->epoch);
            *out++ = '}';
            *out++ = '\n';
        }
    }
    return out;
}

/* The most bytes the lines can take (each header key byte escapes to at most 6). */
static int64_t bound(const columns_t *c, const span_t *spans, Py_ssize_t n_spans, int64_t rows, int64_t headers) {
    int64_t total = 0, row = 0;
    for (Py_ssize_t s = 0; s < n_spans; s++) {
        total += (spans[s].end - row) * (spans[s].kind_len + 200);
        row = spans[s].end;
    }
    for (int64_t i = 0; i < rows; i++) {
        total += base64_len(end_at(c, C_KEY_OFFSETS, i + 1) - end_at(c, C_KEY_OFFSETS, i));
        total += base64_len(end_at(c, C_VALUE_OFFSETS, i + 1) - end_at(c, C_VALUE_OFFSETS, i));
    }
    for (int64_t h = 0; h < headers; h++) {
        total += 16 + base64_len(end_at(c, C_HVALUE_OFFSETS, h + 1) - end_at(c, C_HVALUE_OFFSETS, h));
    }
    return total + 6 * c->used[C_HKEY_DATA];
}

static PyObject *not_plain(const char *what) {
    PyErr_SetString(PyExc_ValueError, what);
    return NULL;
}

/* Whether the buffers hold what a ColumnBuffers of `rows` rows and `headers` headers holds. */
static const char *inconsistent(const columns_t *c, int64_t rows, int64_t headers) {
    if (c->used[C_OFFSET] != 8 * rows || c->used[C_TIMESTAMP] != 8 * rows) {
        return "offset and timestamp columns differ in rows";
    }
    if (c->used[C_KEY_VALIDITY] < (rows + 7) / 8 || c->used[C_VALUE_VALIDITY] < (rows + 7) / 8 ||
        c->used[C_HVALUE_VALIDITY] < (headers + 7) / 8) {
        return "a validity bitmap is short";
    }
    if (!offsets_fit(c, C_KEY_OFFSETS, C_KEY_DATA, rows) || !offsets_fit(c, C_VALUE_OFFSETS, C_VALUE_DATA, rows) ||
        !offsets_fit(c, C_HEADER_OFFSETS, -1, rows) || end_at(c, C_HEADER_OFFSETS, rows) != headers ||
        !offsets_fit(c, C_HKEY_OFFSETS, C_HKEY_DATA, headers) ||
        !offsets_fit(c, C_HVALUE_OFFSETS, C_HVALUE_DATA, headers)) {
        return "an offsets column does not fit its data";
    }
    return NULL;
}

static int read_spans(PyObject *list, span_t *spans, Py_ssize_t n, int64_t rows) {
    int64_t previous = 0;
    for (Py_ssize_t s = 0; s < n; s++) {
        PyObject *span = PyList_GET_ITEM(list, s);
        if (!PyTuple_Check(span) || PyTuple_GET_SIZE(span) != 3 || !PyBytes_Check(PyTuple_GET_ITEM(span, 1))) {
            PyErr_SetString(PyExc_TypeError, "a span is (rows so far, timestamp type label, leader epoch)");
            return -1;
        }
        long long end = PyLong_AsLongLong(PyTuple_GET_ITEM(span, 0));
        long long epoch = PyLong_AsLongLong(PyTuple_GET_ITEM(span, 2));
        if ((end == -1 || epoch == -1) && PyErr_Occurred()) {
            return -1;
        }
        PyObject *kind = PyTuple_GET_ITEM(span, 1);
        spans[s] = (span_t){end, epoch, PyBytes_AS_STRING(kind), PyBytes_GET_SIZE(kind)};
        if (end < previous || end > rows) {
            not_plain("spans go backwards or past the rows");
            return -1;
        }
        previous = end;
    }
    if (previous != rows) {
        not_plain("spans do not cover the rows");
        return -1;
    }
    return 0;
}

/* lines(buffers, used, spans) -> bytes
 *
 * buffers and used as ColumnBuffers holds them; spans a list of (rows so far, timestamp type
 * label, leader epoch), one per decoded batch, in order. */
static PyObject *lines(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 3 || !PyList_Check(args[0]) || PyList_GET_SIZE(args[0]) != NCOL || !PyList_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "lines takes (buffers: list of 15, used: array, spans: list)");
        return NULL;
    }
    Py_buffer views[NCOL];
    Py_buffer used_view;
    int held = 0;
    PyObject *result = NULL;
    span_t *spans = NULL;
    /* Kept alive while the GIL is released: the caller's list may change meanwhile. */
    PyObject *spans_copy = PyList_GetSlice(args[2], 0, PyList_GET_SIZE(args[2]));
    if (spans_copy == NULL) {
        return NULL;
    }
    if (PyObject_GetBuffer(args[1], &used_view, PyBUF_SIMPLE) < 0) {
        Py_DECREF(spans_copy);
        return NULL;
    }
    columns_t c;
    if (used_view.len != 8 * NCOL) {
        not_plain("used holds a length per column");
        goto done;
    }
    for (; held < NCOL; held++) {
        if (PyObject_GetBuffer(PyList_GET_ITEM(args[0], held), &views[held], PyBUF_SIMPLE) < 0) {
            goto done;
        }
        c.at[held] = (const unsigned char *)views[held].buf;
        memcpy(&c.used[held], (const char *)used_view.buf + 8 * held, 8);
        if (c.used[held] < 0 || c.used[held] > views[held].len) {
            not_plain("a buffer is shorter than its used length");
            goto done;
        }
    }
    if (c.used[C_OFFSET] % 8 || c.used[C_HKEY_OFFSETS] < 4 || c.used[C_HKEY_OFFSETS] % 4) {
        not_plain("a column's length is not a whole number of values");
        goto done;
    }
    int64_t rows = c.used[C_OFFSET] / 8, headers = c.used[C_HKEY_OFFSETS] / 4 - 1;
    const char *why = inconsistent(&c, rows, headers);
    if (why != NULL) {
        not_plain(why);
        goto done;
    }
    Py_ssize_t n_spans = PyList_GET_SIZE(spans_copy);
    spans = PyMem_Malloc(sizeof(span_t) * (size_t)(n_spans ? n_spans : 1));
    if (spans == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (read_spans(spans_copy, spans, n_spans, rows) < 0) {
        goto done;
    }
    int64_t size = bound(&c, spans, n_spans, rows, headers);
    if (size > PY_SSIZE_T_MAX) {
        not_plain("the lines would be too large");
        goto done;
    }
    result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (result == NULL) {
        goto done;
    }
    char *start = PyBytes_AS_STRING(result), *end;
    Py_BEGIN_ALLOW_THREADS;
    end = write_lines(start, &c, spans, n_spans);
    Py_END_ALLOW_THREADS;
    if (end == NULL) {
        Py_CLEAR(result);
        not_plain("a header key is not UTF-8");
        goto done;
    }
    _PyBytes_Resize(&result, end - start);
done:
    PyMem_Free(spans);
    for (int i = 0; i < held; i++) {
        PyBuffer_Release(&views[i]);
    }
    PyBuffer_Release(&used_view);
    Py_DECREF(spans_copy);
    return result;
}

/* wide_base64(level=-1): the vector path base64 is written with (0 none, 1 SSSE3, 2 AVX2), set to
 * the narrower of level and the widest the CPU has when level >= 0; the one before is returned. */
static PyObject *wide_base64(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "wide_base64 takes at most one argument");
        return NULL;
    }
    long level = -1;
    if (nargs == 1) {
        level = PyLong_AsLong(args[0]);
        if (level == -1 && PyErr_Occurred()) {
            return NULL;
        }
    }
    int before = use_wide;
#ifdef HAVE_SSSE3_PATH
    if (level >= 0) {
        use_wide = level < widest ? (int)level : widest;
    }
#endif
    return PyLong_FromLong(before);
}

static PyMethodDef methods[] = {
    {"lines", (PyCFunction)(void (*)(void))lines, METH_FASTCALL,
     "NDJSON lines of the rows of column buffers (rlm.stream.ndjson)."},
    {"wide_base64", (PyCFunction)(void (*)(void))wide_base64, METH_FASTCALL,
     "The vector path of base64 (0 none, 1 SSSE3, 2 AVX2); with a level, set to at most it."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "rlm.stream._ndjson",
    .m_doc = "NDJSON lines of a range stream written in C from column buffers.",
    .m_size = 0,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__ndjson(void) {
    fill_pairs();
    pick_base64();
    return PyModule_Create(&module_def);
}
