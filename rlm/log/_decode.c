/*
 * rlm.log._decode: the records of a v2 batch, decoded in C into columns or into Record tuples.
 *
 * The Python reference defines what both answer: rlm.log.v2._decode_records for the records, and
 * rlm.log.columns.append_records for the columns they make. This code only answers faster. It
 * never reports corruption itself: on anything not plainly well-formed (a field out of range, a
 * read past its record, an arithmetic overflow, a header key that is not UTF-8) it raises
 * ValueError naming the record where it gave up, and the Python code decodes the batch again and
 * says what is wrong. Every read is bounds-checked against the record it belongs to: the bytes come
 * from files on disk and remote objects, and may be anything.
 *
 * Column buffers are bytearrays used as growable storage: buffers[i] holds used[i] bytes of column
 * i (see rlm/log/columns.py for the order and the layout, Arrow's), and may be longer.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_decode_checks.h"

#include "_columns.h"

/* The smallest record: a length varint (1 byte) and at least 6 bytes of fields. */
#define MIN_RECORD_BYTES 7

/* An unsigned varint of at most max_bytes at *pos, not reaching limit; bits a 64-bit value cannot
 * hold are dropped (callers mask to 32 or 64 bits, as Kafka does). -1 when it does not fit. */
static inline int read_uvarint(const unsigned char *d, Py_ssize_t limit, Py_ssize_t *pos, int max_bytes,
                               uint64_t *out) {
    Py_ssize_t at = *pos;
    if (at < limit && d[at] < 0x80) { /* nearly every field: one byte */
        *out = d[at];
        *pos = at + 1;
        return 0;
    }
    uint64_t result = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes; i++, at++) {
        if (at >= limit) {
            return -1;
        }
        unsigned char b = d[at];
        if (shift < 64) {
            result |= (uint64_t)(b & 0x7F) << shift;
        }
        if (!(b & 0x80)) {
            *pos = at + 1;
            *out = result;
            return 0;
        }
        shift += 7;
    }
    return -1;
}

static inline int64_t zigzag64(uint64_t u) {
    return (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
}

static inline int32_t zigzag32(uint64_t u) {
    uint32_t v = (uint32_t)u;
    return (int32_t)(v >> 1) ^ -(int32_t)(v & 1);
}

/* A key or value: length varint then bytes; a length of -1 is null. */
typedef struct {
    const unsigned char *at;
    Py_ssize_t len; /* -1: null */
} blob_t;

typedef struct {
    int64_t offset;
    int64_t timestamp;
    blob_t key;
    blob_t value;
    Py_ssize_t headers_at; /* first header's position */
    int32_t header_count;
    Py_ssize_t end;
} record_t;

typedef struct {
    const unsigned char *d;
    Py_ssize_t end;
    int64_t base_offset;
    int64_t base_ts;
    int log_append; /* every record's timestamp is log_append_ts */
    int64_t log_append_ts;
} batch_t;

/* A record's key or value: a zig-zag int32 length (-1 null, other negatives invalid). */
static inline int read_blob(const unsigned char *d, Py_ssize_t limit, Py_ssize_t *pos, blob_t *out) {
    uint64_t u;
    if (read_uvarint(d, limit, pos, 5, &u) < 0) {
        return -1;
    }
    int32_t len = zigzag32(u);
    if (len == -1) {
        out->at = NULL;
        out->len = -1;
        return 0;
    }
    if (len < 0 || (Py_ssize_t)len > limit - *pos) {
        return -1;
    }
    out->at = d + *pos;
    out->len = len;
    *pos += len;
    return 0;
}

/* One header at *pos: a key (never null) and a value. */
static inline int read_header(const unsigned char *d, Py_ssize_t limit, Py_ssize_t *pos, blob_t *key,
                              blob_t *value) {
    if (read_blob(d, limit, pos, key) < 0 || key->len < 0) {
        return -1;
    }
    return read_blob(d, limit, pos, value);
}

/* The fields of the record at *pos up to its header count, each checked (r->end is the record's
 * end, r->headers_at where its headers start). NULL, or why it gave up. */
static inline const char *parse_fields(const batch_t *b, Py_ssize_t pos, record_t *r) {
    const unsigned char *d = b->d;
    uint64_t u;
    Py_ssize_t p = pos;
    if (p >= b->end) {
        return "the data ends before the declared record count";
    }
    if (read_uvarint(d, b->end, &p, 5, &u) < 0) {
        return "bad record length";
    }
    int32_t length = zigzag32(u);
    if (length < 6 || (Py_ssize_t)length > b->end - p) {
        return "record length out of range";
    }
    Py_ssize_t rec_end = p + length;
    p += 1; /* record attributes: unused */
    if (read_uvarint(d, rec_end, &p, 10, &u) < 0) {
        return "bad timestamp delta";
    }
    int64_t ts_delta = zigzag64(u);
    if (read_uvarint(d, rec_end, &p, 5, &u) < 0) {
        return "bad offset delta";
    }
    if (__builtin_add_overflow(b->base_offset, (int64_t)zigzag32(u), &r->offset)) {
        return "offset outside int64";
    }
    if (b->log_append) {
        r->timestamp = b->log_append_ts;
    } else if (__builtin_add_overflow(b->base_ts, ts_delta, &r->timestamp)) {
        return "timestamp outside int64";
    }
    if (read_blob(d, rec_end, &p, &r->key) < 0) {
        return "bad key";
    }
    if (read_blob(d, rec_end, &p, &r->value) < 0) {
        return "bad value";
    }
    if (read_uvarint(d, rec_end, &p, 5, &u) < 0) {
        return "bad header count";
    }
    int32_t count = zigzag32(u);
    if (count < 0) {
        return "negative header count";
    }
    r->headers_at = p;
    r->header_count = count;
    r->end = rec_end;
    return NULL;
}

/* The record at *pos, every field checked; *pos moves past it. NULL, or why it gave up. */
static const char *parse_record(const batch_t *b, Py_ssize_t *pos, record_t *r) {
    const char *why = parse_fields(b, *pos, r);
    if (why != NULL) {
        return why;
    }
    Py_ssize_t p = r->headers_at;
    for (int32_t i = 0; i < r->header_count; i++) {
        blob_t key, value;
        if (read_header(b->d, r->end, &p, &key, &value) < 0) {
            return "bad header";
        }
    }
    if (p != r->end) {
        return "the record's fields do not take its length";
    }
    *pos = r->end;
    return NULL;
}

static int as_int64(PyObject *obj, int64_t *out) {
    long long value = PyLong_AsLongLong(obj);
    if (value == -1 && PyErr_Occurred()) {
        return -1;
    }
    *out = (int64_t)value;
    return 0;
}

/* The arguments both entry points share: data, pos, end, count, base_offset, base_ts, log_append. */
static int batch_args(PyObject *const *args, Py_buffer *view, batch_t *b, Py_ssize_t *pos, int64_t *count) {
    int64_t p, end;
    if (as_int64(args[1], &p) || as_int64(args[2], &end) || as_int64(args[3], count) ||
        as_int64(args[4], &b->base_offset) || as_int64(args[5], &b->base_ts)) {
        return -1;
    }
    b->log_append = args[6] != Py_None;
    b->log_append_ts = 0;
    if (b->log_append && as_int64(args[6], &b->log_append_ts)) {
        return -1;
    }
    if (PyObject_GetBuffer(args[0], view, PyBUF_SIMPLE) < 0) {
        return -1;
    }
    if (p < 0 || end < p || end > (int64_t)view->len || *count < 0) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "positions or count out of range");
        return -1;
    }
    b->d = (const unsigned char *)view->buf;
    b->end = (Py_ssize_t)end;
    *pos = (Py_ssize_t)p;
    return 0;
}

static uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static uint64_t be64(const unsigned char *p) {
    return ((uint64_t)be32(p) << 32) | (uint64_t)be32(p + 4);
}

#define V2_HEADER_SIZE 61

/* The v2 batch at d[p:] of len bytes: its header read as rlm.log.v2.parse_v2_header reads it and
 * (verify) its CRC checked. NULL with *b (over d: the records of an uncompressed batch start at
 * p + V2_HEADER_SIZE), *count, *size and *codec set; or why it gave up: another magic, a header the
 * Python parser would refuse, a batch running past len, a bad CRC. */
static const char *v2_batch_at(const unsigned char *d, int64_t len, int64_t p, int verify, batch_t *b,
                               int64_t *count, int64_t *size, int *codec) {
    if (p < 0 || len - p < V2_HEADER_SIZE) {
        return "no whole v2 header there";
    }
    const unsigned char *h = d + p;
    *size = (int64_t)(int32_t)be32(h + 8) + 12;
    uint32_t attributes = ((uint32_t)h[21] << 8) | h[22];
    *count = (int32_t)be32(h + 57);
    *codec = (int)(attributes & 0x07);
    if (h[16] != 2 || *size < V2_HEADER_SIZE || *size > len - p || *count < 0 || (int32_t)be32(h + 23) < 0) {
        return "not a whole well-formed v2 batch";
    }
    if (verify && crc32c(h + 21, (Py_ssize_t)*size - 21) != be32(h + 17)) {
        return "CRC mismatch";
    }
    b->d = d;
    b->end = (Py_ssize_t)(p + *size);
    b->base_offset = (int64_t)be64(h);
    b->base_ts = (int64_t)be64(h + 27);
    b->log_append = (attributes & 0x08) != 0;
    b->log_append_ts = (int64_t)be64(h + 35);
    return NULL;
}

/* The other form of the arguments: buf, pos, verify_crc, for the whole uncompressed v2 batch at
 * buf[pos:] (v2_batch_at); a compressed batch gives up too. */
static int batch_from_header(PyObject *const *args, Py_buffer *view, batch_t *b, Py_ssize_t *pos, int64_t *count) {
    int64_t p, size;
    int codec;
    if (as_int64(args[1], &p)) {
        return -1;
    }
    int verify = PyObject_IsTrue(args[2]);
    if (verify < 0 || PyObject_GetBuffer(args[0], view, PyBUF_SIMPLE) < 0) {
        return -1;
    }
    const char *why = v2_batch_at((const unsigned char *)view->buf, (int64_t)view->len, p, verify, b, count, &size,
                                  &codec);
    if (why == NULL && codec != 0) {
        why = "compressed";
    }
    if (why != NULL) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, why);
        return -1;
    }
    *pos = (Py_ssize_t)p + V2_HEADER_SIZE;
    return 0;
}

/* Either form of the arguments: 7 (data, pos, end, count, base_offset, base_ts, log_append) or 3
 * (buf, pos, verify_crc). */
static int any_batch_args(PyObject *const *args, int whole_batch, Py_buffer *view, batch_t *b, Py_ssize_t *pos,
                          int64_t *count) {
    return whole_batch ? batch_from_header(args, view, b, pos, count) : batch_args(args, view, b, pos, count);
}

static PyObject *gave_up(int64_t index, const char *why) {
    PyErr_Format(PyExc_ValueError, "record %lld: %s", (long long)index, why);
    return NULL;
}

/* -- columns ----------------------------------------------------------------------------------- */

typedef struct {
    PyObject *buffers[NCOL];
    unsigned char *base[NCOL];
    Py_ssize_t cap[NCOL];
    int64_t *used;
    int64_t goal_rows; /* the rows the call expects to reach (0: unknown), to size buffers at once */
    PyThreadState *released; /* the thread's state while the GIL is released (see cols_gil) */
} cols_t;

/* Take the GIL back if the walk released it (cols_release): every call of the C API on the record
 * path (growing a buffer, setting an error) comes after this; a buffer grown, grow gives it up
 * again. */
static inline void cols_gil(cols_t *c) {
    if (c->released != NULL) {
        PyEval_RestoreThread(c->released);
        c->released = NULL;
    }
}

/* Release the GIL while records are decoded (other threads, the event loop among them, run in the
 * meantime). The buffers are the caller's, reached by no other thread; the bytes decoded are held
 * by a buffer view. */
static inline void cols_release(cols_t *c) {
    if (c->released == NULL) {
        c->released = PyEval_SaveThread();
    }
}

/* Room for `need` bytes in column col. A buffer at least doubles; once rows are in and the call
 * knows how many it goes to, it grows to what the rows so far extrapolate to (at most eightfold),
 * so a column is copied about once rather than at every doubling. */
static int grow(cols_t *c, int col, Py_ssize_t need) {
    int released = c->released != NULL; /* given up again once the buffer has grown */
    cols_gil(c);
    Py_ssize_t cap = c->cap[col] * 2;
    int64_t rows = c->used[C_OFFSET] / 8;
    if (c->goal_rows > rows && rows >= 64) {
        double per_row = (double)c->used[col] / (double)rows;
        double want = (double)need + per_row * (double)(c->goal_rows - rows) * 1.125;
        double most = (double)c->cap[col] * 8.0;
        if (want > most) {
            want = most;
        }
        if (want > (double)cap) {
            cap = (Py_ssize_t)want;
        }
    }
    if (cap < need) {
        cap = need;
    }
    if (cap < 64) {
        cap = 64;
    }
    if (PyByteArray_Resize(c->buffers[col], cap) < 0) {
        return -1;
    }
    c->base[col] = (unsigned char *)PyByteArray_AS_STRING(c->buffers[col]);
    c->cap[col] = cap;
    if (released) {
        cols_release(c);
    }
    return 0;
}

static inline int reserve(cols_t *c, int col, Py_ssize_t more) {
    Py_ssize_t need = (Py_ssize_t)c->used[col] + more;
    return __builtin_expect(need <= c->cap[col], 1) ? 0 : grow(c, col, need);
}

/* Room for n more rows in the fixed-width columns and the rows' validity bitmaps. */
static int reserve_rows(cols_t *c, int64_t n) {
    static const int widths[][2] = {{C_OFFSET, 8},       {C_TIMESTAMP, 8},    {C_BATCH, 4},
                                    {C_KEY_OFFSETS, 4},  {C_VALUE_OFFSETS, 4}, {C_HEADER_OFFSETS, 4}};
    for (size_t k = 0; k < sizeof widths / sizeof widths[0]; k++) {
        if (reserve(c, widths[k][0], (Py_ssize_t)n * widths[k][1]) < 0) {
            return -1;
        }
    }
    return reserve(c, C_KEY_VALIDITY, (Py_ssize_t)(n / 8 + 1)) < 0 ||
                   reserve(c, C_VALUE_VALIDITY, (Py_ssize_t)(n / 8 + 1)) < 0
               ? -1
               : 0;
}

/* A little-endian store of 8 or 4 bytes (one write on a little-endian host). */
static inline void store_le(unsigned char *p, uint64_t v, int width) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (width == 8) {
        memcpy(p, &v, 8);
    } else {
        uint32_t w = (uint32_t)v;
        memcpy(p, &w, 4);
    }
#else
    for (int i = 0; i < width; i++) {
        p[i] = (unsigned char)(v >> (8 * i));
    }
#endif
}

/* The writes below go to room already reserved. */
static inline void put_le(cols_t *c, int col, uint64_t v, int width) {
    store_le(c->base[col] + c->used[col], v, width);
    c->used[col] += width;
}

/* Row `index` of a validity bitmap; a new byte starts at 0. */
static inline void put_bit(cols_t *c, int col, int64_t index, int valid) {
    if (index % 8 == 0) {
        c->base[col][c->used[col]++] = 0;
    }
    if (valid) {
        c->base[col][index / 8] |= (unsigned char)(1u << (index % 8));
    }
}

/* The end of the latest value in a data column, as the next int32 of its offsets column. */
static inline int put_end(cols_t *c, int offsets_col, int data_col) {
    int64_t size = c->used[data_col];
    if (size > INT32_MAX) {
        cols_gil(c);
        PyErr_SetString(PyExc_ValueError, "more than 2 GiB in one column");
        return -1;
    }
    put_le(c, offsets_col, (uint64_t)size, 4);
    return 0;
}

/* A value's bytes (the data column grows for them) and its end offset. */
static inline int put_bytes(cols_t *c, int offsets_col, int data_col, const blob_t *blob) {
    if (blob->len > 0) {
        if (reserve(c, data_col, blob->len) < 0) {
            return -1;
        }
        memcpy(c->base[data_col] + c->used[data_col], blob->at, (size_t)blob->len);
        c->used[data_col] += blob->len;
    }
    return put_end(c, offsets_col, data_col);
}

/* One header as the next row of the header table. */
static inline int put_header(cols_t *c, const blob_t *key, const blob_t *value) {
    int64_t index = c->used[C_HKEY_OFFSETS] / 4 - 1;
    if (reserve(c, C_HKEY_OFFSETS, 4) < 0 || reserve(c, C_HVALUE_OFFSETS, 4) < 0 ||
        reserve(c, C_HVALUE_VALIDITY, 1) < 0 || put_bytes(c, C_HKEY_OFFSETS, C_HKEY_DATA, key) < 0) {
        return -1;
    }
    put_bit(c, C_HVALUE_VALIDITY, index, value->len >= 0);
    return put_bytes(c, C_HVALUE_OFFSETS, C_HVALUE_DATA, value);
}

/* Take back every row appended since `saved` (the used lengths then), as ColumnBuffers.rollback
 * does: bits of rows taken back read as 0 again. */
static void rollback(cols_t *c, const int64_t *saved) {
    memcpy(c->used, saved, sizeof(int64_t) * NCOL);
    int64_t rows = c->used[C_OFFSET] / 8;
    int64_t headers = c->used[C_HKEY_OFFSETS] / 4 - 1;
    const int columns[3] = {C_KEY_VALIDITY, C_VALUE_VALIDITY, C_HVALUE_VALIDITY};
    const int64_t counts[3] = {rows, rows, headers};
    for (int k = 0; k < 3; k++) {
        if (counts[k] % 8) {
            c->base[columns[k]][counts[k] / 8] &= (unsigned char)((1u << (counts[k] % 8)) - 1);
        }
    }
}

/* Whether the used lengths of the per-row columns hold one number of rows, and those of the header
 * table one number of headers, as ColumnBuffers keeps them. */
static int rows_agree(const int64_t *used) {
    int64_t rows = used[C_OFFSET] / 8, headers = used[C_HKEY_OFFSETS] / 4 - 1;
    return used[C_OFFSET] % 8 == 0 && used[C_TIMESTAMP] == 8 * rows && used[C_BATCH] == 4 * rows &&
           used[C_KEY_OFFSETS] == 4 * (rows + 1) && used[C_VALUE_OFFSETS] == 4 * (rows + 1) &&
           used[C_HEADER_OFFSETS] == 4 * (rows + 1) && used[C_KEY_VALIDITY] == (rows + 7) / 8 &&
           used[C_VALUE_VALIDITY] == (rows + 7) / 8 && used[C_HKEY_OFFSETS] % 4 == 0 && headers >= 0 &&
           used[C_HVALUE_OFFSETS] == used[C_HKEY_OFFSETS] && used[C_HVALUE_VALIDITY] == (headers + 7) / 8;
}

/* The column buffers and their used lengths, as the Python side passes them; *used_view is held
 * until the caller releases it. */
static int cols_open(PyObject *buffers, PyObject *used, cols_t *c, Py_buffer *used_view) {
    if (!PyList_Check(buffers) || PyList_GET_SIZE(buffers) != NCOL) {
        PyErr_SetString(PyExc_TypeError, "buffers must be a list of the column bytearrays");
        return -1;
    }
    for (int i = 0; i < NCOL; i++) {
        PyObject *buffer = PyList_GET_ITEM(buffers, i);
        if (!PyByteArray_CheckExact(buffer)) {
            PyErr_SetString(PyExc_TypeError, "buffers must be a list of the column bytearrays");
            return -1;
        }
        c->buffers[i] = buffer;
        c->base[i] = (unsigned char *)PyByteArray_AS_STRING(buffer);
        c->cap[i] = PyByteArray_GET_SIZE(buffer);
    }
    if (PyObject_GetBuffer(used, used_view, PyBUF_WRITABLE | PyBUF_FORMAT) < 0) {
        return -1;
    }
    if (used_view->len != NCOL * 8 || used_view->format == NULL || strcmp(used_view->format, "q") != 0) {
        PyBuffer_Release(used_view);
        PyErr_SetString(PyExc_TypeError, "used must be an array('q') of one length per column");
        return -1;
    }
    c->used = (int64_t *)used_view->buf;
    c->goal_rows = 0;
    c->released = NULL;
    for (int i = 0; i < NCOL; i++) {
        if (c->used[i] < 0 || c->used[i] > c->cap[i]) {
            PyBuffer_Release(used_view);
            PyErr_SetString(PyExc_ValueError, "a used length is out of its buffer");
            return -1;
        }
    }
    if (!rows_agree(c->used)) { /* put_records writes the fixed-width columns at a row's place */
        PyBuffer_Release(used_view);
        PyErr_SetString(PyExc_ValueError, "the used lengths do not hold one number of rows");
        return -1;
    }
    return 0;
}

/* Bit i of a validity bitmap at `bits` (a new byte starts at 0). */
static inline void store_bit(unsigned char *bits, int64_t i, int valid) {
    if (i % 8 == 0) {
        bits[i / 8] = 0;
    }
    if (valid) {
        bits[i / 8] |= (unsigned char)(1u << (i % 8));
    }
}

/* A key or value column's data in the record loop, held in locals (the compiler keeps them in
 * registers across the copies, where it would reload c's fields after every byte stored). */
typedef struct {
    int col;
    unsigned char *base;
    int64_t size;
    Py_ssize_t cap;
} data_col_t;

static inline data_col_t data_col(cols_t *c, int col) {
    data_col_t d = {col, c->base[col], c->used[col], c->cap[col]};
    return d;
}

/* A value's bytes appended to d; -1 with an error set (memory, or past 2 GiB). */
static inline int data_put(cols_t *c, data_col_t *d, const blob_t *blob) {
    if (blob->len > 0) {
        if (__builtin_expect(d->size + blob->len > d->cap, 0)) {
            c->used[d->col] = d->size;
            if (grow(c, d->col, (Py_ssize_t)(d->size + blob->len)) < 0) {
                return -1;
            }
            d->base = c->base[d->col];
            d->cap = c->cap[d->col];
        }
        memcpy(d->base + d->size, blob->at, (size_t)blob->len);
        d->size += blob->len;
    }
    if (d->size > INT32_MAX) {
        cols_gil(c);
        PyErr_SetString(PyExc_ValueError, "more than 2 GiB in one column");
        return -1;
    }
    return 0;
}

/* Decode the count records of b from pos and append those with first <= offset <= last; *appended
 * counts them, *index is the record reached. NULL when every record was decoded (or a Python error
 * is set), else why it gave up. The caller takes the rows back when it does not succeed. Each
 * record is read once: its fields, its headers checked and appended as they are read. The
 * fixed-width columns have room for every row of the batch (reserve_rows): they are written at
 * their row, and every used length is brought up to date after each row. */
static const char *put_records(cols_t *c, const batch_t *b, Py_ssize_t pos, int64_t count, int64_t first,
                               int64_t last, int32_t batch_no, int64_t *appended, int64_t *index) {
    int64_t room = (b->end - pos) / MIN_RECORD_BYTES + 1; /* every record holds >= 7 bytes */
    *index = 0;
    if (reserve_rows(c, count < room ? count : room) < 0) {
        return NULL;
    }
    int64_t *used = c->used;
    int64_t row = used[C_OFFSET] / 8;
    unsigned char *offsets = c->base[C_OFFSET], *timestamps = c->base[C_TIMESTAMP], *batches = c->base[C_BATCH];
    unsigned char *key_ends = c->base[C_KEY_OFFSETS], *value_ends = c->base[C_VALUE_OFFSETS];
    unsigned char *header_ends = c->base[C_HEADER_OFFSETS];
    unsigned char *key_valid = c->base[C_KEY_VALIDITY], *value_valid = c->base[C_VALUE_VALIDITY];
    data_col_t keys = data_col(c, C_KEY_DATA), values = data_col(c, C_VALUE_DATA);
    for (int64_t i = 0; i < count; i++) {
        record_t r;
        *index = i;
        const char *why = parse_fields(b, pos, &r);
        if (why != NULL) {
            return why;
        }
        int keep = r.offset >= first && r.offset <= last;
        if (keep) {
            store_le(offsets + 8 * row, (uint64_t)r.offset, 8);
            store_le(timestamps + 8 * row, (uint64_t)r.timestamp, 8);
            store_le(batches + 4 * row, (uint64_t)(uint32_t)batch_no, 4);
            store_bit(key_valid, row, r.key.len >= 0);
            store_bit(value_valid, row, r.value.len >= 0);
            if (data_put(c, &keys, &r.key) < 0 || data_put(c, &values, &r.value) < 0) {
                return NULL;
            }
            /* offsets columns start with a 0: row's end is entry row + 1 */
            store_le(key_ends + 4 * (row + 1), (uint64_t)keys.size, 4);
            store_le(value_ends + 4 * (row + 1), (uint64_t)values.size, 4);
        }
        Py_ssize_t p = r.headers_at;
        for (int32_t h = 0; h < r.header_count; h++) {
            blob_t key, value;
            if (read_header(b->d, r.end, &p, &key, &value) < 0) {
                return "bad header";
            }
            if (!valid_utf8(key.at, key.len)) {
                return "a header key is not UTF-8";
            }
            if (keep && put_header(c, &key, &value) < 0) {
                return NULL;
            }
        }
        if (p != r.end) {
            return "the record's fields do not take its length";
        }
        if (keep) {
            int64_t headers = used[C_HKEY_OFFSETS] / 4 - 1;
            if (headers > INT32_MAX) {
                cols_gil(c);
                PyErr_SetString(PyExc_ValueError, "more than 2**31 headers in one column");
                return NULL;
            }
            store_le(header_ends + 4 * (row + 1), (uint64_t)headers, 4);
            row++;
            used[C_OFFSET] = 8 * row;
            used[C_TIMESTAMP] = 8 * row;
            used[C_BATCH] = 4 * row;
            used[C_KEY_OFFSETS] = used[C_VALUE_OFFSETS] = used[C_HEADER_OFFSETS] = 4 * (row + 1);
            used[C_KEY_VALIDITY] = used[C_VALUE_VALIDITY] = (row + 7) / 8;
            used[C_KEY_DATA] = keys.size;
            used[C_VALUE_DATA] = values.size;
            (*appended)++;
        }
        pos = r.end;
    }
    *index = count;
    return pos != b->end ? "bytes left after the declared records" : NULL;
}

static int batch_number(PyObject *obj, int64_t *batch_no) {
    if (as_int64(obj, batch_no)) {
        return -1;
    }
    if (*batch_no < 0 || *batch_no > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "batch number out of int32 range");
        return -1;
    }
    return 0;
}

/* append_columns(buffers, used, data, pos, end, count, base_offset, base_ts, log_append,
 *                first_offset, last_offset, batch_no) -> int
 * append_batch_columns(buffers, used, buf, pos, verify_crc, first_offset, last_offset, batch_no)
 *
 * Decode the count records of data[pos:end] (or of the uncompressed v2 batch at buf[pos:]) and
 * append those with first_offset <= offset <= last_offset to the column buffers; return how many.
 * When it raises, nothing stays appended. */
static PyObject *append_common(PyObject *const *args, Py_ssize_t nargs, int whole_batch) {
    Py_ssize_t tail = whole_batch ? 5 : 9;
    if (nargs != tail + 3) {
        PyErr_Format(PyExc_TypeError, "takes %zd arguments", tail + 3);
        return NULL;
    }
    int64_t first, last, batch_no, count = 0;
    if (as_int64(args[tail], &first) || as_int64(args[tail + 1], &last) || batch_number(args[tail + 2], &batch_no)) {
        return NULL;
    }
    cols_t c;
    Py_buffer used_view;
    if (cols_open(args[0], args[1], &c, &used_view) < 0) {
        return NULL;
    }
    int64_t saved[NCOL];
    memcpy(saved, c.used, sizeof saved);
    Py_buffer view;
    batch_t b;
    Py_ssize_t pos;
    if (any_batch_args(args + 2, whole_batch, &view, &b, &pos, &count) < 0) {
        PyBuffer_Release(&used_view);
        return NULL;
    }
    int64_t appended = 0, i = 0;
    const char *why = put_records(&c, &b, pos, count, first, last, (int32_t)batch_no, &appended, &i);
    if (why != NULL || PyErr_Occurred()) {
        rollback(&c, saved);
    }
    PyBuffer_Release(&view);
    PyBuffer_Release(&used_view);
    if (PyErr_Occurred()) {
        return NULL;
    }
    if (why != NULL) {
        return gave_up(i, why);
    }
    return PyLong_FromLongLong((long long)appended);
}

static PyObject *append_columns(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    return append_common(args, nargs, 0);
}

static PyObject *append_batch_columns(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    return append_common(args, nargs, 1);
}

#include "_decode_log.h"
#include "_decode_walk.h"

#include "_decode_tuples.h"

/* crc32c(data) -> int: CRC-32C of data, as the batch checks compute it (for tests). */
static PyObject *crc32c_py(PyObject *module, PyObject *arg) {
    (void)module;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    uint32_t c = crc32c((const unsigned char *)view.buf, view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(c);
}

static PyMethodDef methods[] = {
    {"append_columns", (PyCFunction)(void (*)(void))append_columns, METH_FASTCALL,
     "Append the records of a v2 batch's records to column buffers."},
    {"decode_records", (PyCFunction)(void (*)(void))decode_records, METH_FASTCALL,
     "The records of a v2 batch's records as Record tuples."},
    {"append_batch_columns", (PyCFunction)(void (*)(void))append_batch_columns, METH_FASTCALL,
     "Append the records of an uncompressed v2 batch to column buffers, its CRC checked."},
    {"decode_batch_records", (PyCFunction)(void (*)(void))decode_batch_records, METH_FASTCALL,
     "The records of an uncompressed v2 batch as Record tuples, its CRC checked."},
    {"append_log_columns", (PyCFunction)(void (*)(void))append_log_columns, METH_FASTCALL,
     "Append the records of the v2 batches of a log's bytes to column buffers, CRCs checked."},
    {"walk_v2_headers", (PyCFunction)(void (*)(void))walk_v2_headers, METH_FASTCALL,
     "The headers of the whole v2 batches of a log's bytes, each batch's CRC checked."},
    {"crc32c", (PyCFunction)crc32c_py, METH_O, "CRC-32C of a buffer."},
    {"decompress_plain", (PyCFunction)(void (*)(void))decompress_plain, METH_FASTCALL,
     "A compressed v2 payload as the log walk decompresses it."},
    {"decompress_native", (PyCFunction)(void (*)(void))decompress_native, METH_FASTCALL,
     "A compressed v2 payload as the log walk decompresses it without the GIL."},
    {"set_native", (PyCFunction)set_native, METH_O, "Turn native decompression on or off; the codecs it does."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "rlm.log._decode",
    .m_doc = "The records of v2 batches decoded in C, into columns or Record tuples.",
    .m_size = 0,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__decode(void) {
    crc_init();
    if (codecs_init() < 0) {
        return NULL;
    }
    native_init();
#ifdef HAVE_CRC_INSTRUCTION
    crc_shift_init();
    __builtin_cpu_init();
    use_crc_instruction = __builtin_cpu_supports("sse4.2");
#endif
    return PyModule_Create(&module_def);
}
