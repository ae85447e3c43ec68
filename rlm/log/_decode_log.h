/*
 * append_log_columns: every v2 batch of a log's bytes walked and decoded into columns in one call,
 * compressed ones decompressed by _decode_codecs.h. Part of rlm.log._decode (included by
 * _decode.c after its column functions); the Python reference is rlm.log.columns.append_log_py.
 */
#ifndef RLM_DECODE_LOG_H
#define RLM_DECODE_LOG_H

/* The records of a batch (its payload decompressed) of at least this many bytes are decoded with
 * the GIL released: below it, giving the GIL up and taking it back costs more than it frees. */
#define RELEASE_GIL_BYTES 4096

/* The largest max_rows the buffers are sized for ahead (larger: they double as they fill). */
#define GOAL_ROWS_MAX (1 << 22)

#include "_decode_codecs.h"

/* Whether the error set is one the walk stops on (the reference then says what is wrong), rather
 * than one it passes on (memory, interrupts). */
static int stops_on_error(void) {
    return PyErr_ExceptionMatches(PyExc_Exception) && !PyErr_ExceptionMatches(PyExc_MemoryError);
}

static int put_position(PyObject *positions, int64_t p) {
    if (positions == Py_None) {
        return 0;
    }
    unsigned char le[8];
    for (int i = 0; i < 8; i++) {
        le[i] = (unsigned char)((uint64_t)p >> (8 * i));
    }
    Py_ssize_t size = PyByteArray_GET_SIZE(positions);
    if (PyByteArray_Resize(positions, size + 8) < 0) {
        return -1;
    }
    memcpy(PyByteArray_AS_STRING(positions) + size, le, 8);
    return 0;
}

/* The records of the v2 batch b (count of them, size bytes at d + p) appended, a compressed one's
 * decompressed into *out: natively where the codec is (native_has: without the GIL), else by the
 * library calls (the GIL taken for them). The GIL, once given up (cols_release), stays given up for
 * the batches after: only what needs it (a library call, a buffer grown, an error) takes it back.
 * NULL, or why not; a Python error may be set only while the GIL is held (c->released NULL). */
static const char *put_batch(cols_t *c, batch_t *b, const unsigned char *d, int64_t p, int64_t size, int codec,
                             int64_t count, int64_t first, int64_t last, int32_t batch_no, PyObject *calls,
                             plain_out_t *out, native_state_t *native_state, int64_t *appended) {
    int64_t index = 0;
    if (codec == 0) {
        if (size >= RELEASE_GIL_BYTES) {
            cols_release(c);
        }
        return put_records(c, b, (Py_ssize_t)p + V2_HEADER_SIZE, count, first, last, batch_no, appended, &index);
    }
    const unsigned char *payload = d + p + V2_HEADER_SIZE;
    const char *why;
    if (native_has(codec)) {
        if (size >= RELEASE_GIL_BYTES) {
            cols_release(c);
        }
        why = native_decompress(codec, payload, size - V2_HEADER_SIZE, out, native_state);
        if (why != NULL) {
            return why;
        }
    } else {
        cols_gil(c);
        why = plain_decompress(calls, codec, payload, size - V2_HEADER_SIZE, out);
        if (why != NULL || PyErr_Occurred()) {
            plain_out_release(out);
            return why != NULL ? why : "not decompressed";
        }
    }
    b->d = out->at;
    b->end = out->len;
    if (out->len >= RELEASE_GIL_BYTES) {
        cols_release(c);
    }
    why = put_records(c, b, 0, count, first, last, batch_no, appended, &index);
    if (out->holding) {
        cols_gil(c);
        plain_out_release(out);
    }
    return why;
}

/* Room in the value column, at once, for the values of the uncompressed v2 batches the walk starts
 * with (up to max_rows records): their records' bytes bound them. The column then grows by no copy
 * for them (a range stream's groups of uncompressed batches; trim gives back what is not used). */
static int reserve_plain_values(cols_t *c, const unsigned char *d, int64_t p, int64_t end, int64_t max_rows) {
    int64_t bytes = 0, rows = 0;
    while (end - p >= V2_HEADER_SIZE && rows < max_rows) {
        int64_t size = (int64_t)(int32_t)be32(d + p + 8) + 12;
        unsigned attributes = ((unsigned)d[p + 21] << 8) | d[p + 22];
        int64_t count = (int32_t)be32(d + p + 57);
        if (size < V2_HEADER_SIZE || size > end - p || d[p + 16] != 2 || (attributes & 0x07) != 0 || count < 0) {
            break;
        }
        bytes += size - V2_HEADER_SIZE;
        rows += count;
        p += size;
    }
    return bytes > 0 ? reserve(c, C_VALUE_DATA, (Py_ssize_t)bytes) : 0;
}

/* Bytes per row reserved ahead in the key column and in each header data column, for at most
 * ROWS_AHEAD rows: keys and a header per record of these sizes or less need no buffer grown in the
 * walk (larger ones, or more rows, grow them as they come: see grow). */
#define KEY_BYTES_AHEAD 16
#define HEADER_BYTES_AHEAD 16
#define ROWS_AHEAD 4096

/* Room, at once, for the `rows` rows expected in the fixed-width columns, and for the keys and a
 * header of the usual sizes of their first ROWS_AHEAD: taken while the GIL is held, before the
 * walk gives it up. A buffer grown during the walk takes the GIL back, which waits while the event
 * loop or another thread holds it: a dozen columns grown step by step stalled a range stream's
 * decodes. */
static int reserve_expected(cols_t *c, int64_t rows) {
    int64_t ahead = rows < ROWS_AHEAD ? rows : ROWS_AHEAD;
    static const int per_row[][2] = {{C_KEY_DATA, KEY_BYTES_AHEAD},   {C_HKEY_OFFSETS, 4},
                                     {C_HKEY_DATA, HEADER_BYTES_AHEAD}, {C_HVALUE_OFFSETS, 4},
                                     {C_HVALUE_DATA, HEADER_BYTES_AHEAD}};
    if (reserve_rows(c, rows + 1) < 0 || reserve(c, C_HVALUE_VALIDITY, (Py_ssize_t)(ahead / 8 + 1)) < 0) {
        return -1;
    }
    for (size_t k = 0; k < sizeof per_row / sizeof per_row[0]; k++) {
        if (reserve(c, per_row[k][0], (Py_ssize_t)ahead * per_row[k][1]) < 0) {
            return -1;
        }
    }
    return 0;
}

/* append_log_columns(buffers, used, buf, pos, end, verify_crc, first_offset, last_offset, batch_no,
 *                    max_rows, calls, positions[, expected_rows]) -> (position, batches, rows)
 *
 * Walk the batches of buf[pos:end] and append the records with first_offset <= offset <=
 * last_offset of each, as append_batch_columns does; the i-th batch walked is batch number
 * batch_no + i, and its position is appended to positions (int64 little-endian) unless that is
 * None. A compressed batch's records are its payload decompressed by plain_decompress with the
 * library calls `calls` (rlm.log.codecs.plain_calls; see _decode_codecs.h). The walk stops before
 * a batch once rows >= max_rows, and before any batch it does not take: not v2, not whole before
 * end, not well-formed, a bad CRC, an unknown codec, a payload it gives up on (a library raising
 * among them), records it gives up on. Nothing of that batch stays appended; the caller goes on
 * from the position returned. When it raises (memory), nothing of the call stays appended.
 * expected_rows (absent or 0: unknown) is the rows the call is expected to append: it only sizes
 * the buffers (see grow); where it is unknown, max_rows does when it is small. */
static PyObject *append_log_columns(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 12 && nargs != 13) {
        PyErr_SetString(PyExc_TypeError, "takes 12 or 13 arguments");
        return NULL;
    }
    int64_t p, end, first, last, batch_no, max_rows, expected_rows = 0;
    if (as_int64(args[3], &p) || as_int64(args[4], &end) || as_int64(args[6], &first) ||
        as_int64(args[7], &last) || batch_number(args[8], &batch_no) || as_int64(args[9], &max_rows) ||
        (nargs == 13 && as_int64(args[12], &expected_rows))) {
        return NULL;
    }
    int verify = PyObject_IsTrue(args[5]);
    PyObject *calls = args[10], *positions = args[11];
    if (verify < 0) {
        return NULL;
    }
    if (!PyTuple_CheckExact(calls) || PyTuple_GET_SIZE(calls) != 5) {
        PyErr_SetString(PyExc_TypeError, "calls must be a tuple of the 5 library calls");
        return NULL;
    }
    if (positions != Py_None && !PyByteArray_CheckExact(positions)) {
        PyErr_SetString(PyExc_TypeError, "positions must be a bytearray or None");
        return NULL;
    }
    cols_t c;
    Py_buffer used_view, view;
    if (cols_open(args[0], args[1], &c, &used_view) < 0) {
        return NULL;
    }
    if (PyObject_GetBuffer(args[2], &view, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&used_view);
        return NULL;
    }
    if (p < 0 || end < p || end > (int64_t)view.len) {
        PyBuffer_Release(&view);
        PyBuffer_Release(&used_view);
        PyErr_SetString(PyExc_ValueError, "positions out of range");
        return NULL;
    }
    const unsigned char *d = (const unsigned char *)view.buf;
    int64_t rows_before = c.used[C_OFFSET] / 8;
    if (expected_rows > 0 && expected_rows <= GOAL_ROWS_MAX) { /* buffers sized for them (see grow) */
        c.goal_rows = rows_before + expected_rows;
    } else if (max_rows <= GOAL_ROWS_MAX) { /* an Arrow batch's worth */
        c.goal_rows = rows_before + max_rows;
    }
    if ((expected_rows > 0 && c.goal_rows > rows_before && reserve_expected(&c, c.goal_rows - rows_before) < 0) ||
        reserve_plain_values(&c, d, p, end, max_rows) < 0) {
        PyBuffer_Release(&view);
        PyBuffer_Release(&used_view);
        return NULL;
    }
    int64_t start[NCOL];
    memcpy(start, c.used, sizeof start);
    Py_ssize_t positions_start = positions == Py_None ? 0 : PyByteArray_GET_SIZE(positions);
    int64_t batches = 0, rows = 0;
    int failed = 0;
    plain_out_t out = {NULL, 0, {0}, 0, NULL, 0};
    native_state_t native_state = {NULL};
    while (p < end && rows < max_rows && batch_no + batches <= INT32_MAX) {
        batch_t b;
        int64_t count, size, appended = 0;
        int codec;
        if (v2_batch_at(d, end, p, verify, &b, &count, &size, &codec) != NULL || codec > 4) {
            break;
        }
        int64_t saved[NCOL];
        memcpy(saved, c.used, sizeof saved);
        const char *why = put_batch(&c, &b, d, p, size, codec, count, first, last, (int32_t)(batch_no + batches),
                                    calls, &out, &native_state, &appended);
        if (why != NULL || (c.released == NULL && PyErr_Occurred())) {
            cols_gil(&c);
            rollback(&c, saved);
            if (PyErr_Occurred() && !stops_on_error()) {
                failed = 1;
            } else {
                PyErr_Clear();
            }
            break;
        }
        if (positions != Py_None) {
            cols_gil(&c);
            if (put_position(positions, p) < 0) {
                failed = 1;
                break;
            }
        }
        rows += appended;
        batches++;
        p += size;
    }
    cols_gil(&c);
    native_state_free(&native_state);
    if (failed) {
        rollback(&c, start);
        if (positions != Py_None && PyByteArray_GET_SIZE(positions) > positions_start) {
            PyObject *type, *value, *traceback;
            PyErr_Fetch(&type, &value, &traceback);
            PyByteArray_Resize(positions, positions_start); /* shrinking */
            PyErr_Restore(type, value, traceback);
        }
    }
    plain_out_free(&out);
    PyBuffer_Release(&view);
    PyBuffer_Release(&used_view);
    if (failed) {
        return NULL;
    }
    return Py_BuildValue("(LLL)", (long long)p, (long long)batches, (long long)rows);
}

#endif
