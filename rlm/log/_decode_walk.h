/*
 * walk_v2_headers: the headers of the whole v2 batches of a log's bytes read, and each batch's
 * CRC-32C checked, in one call. Part of rlm.log._decode (included by _decode.c after be32/be64);
 * the Python reference is rlm.log.walk.walk_v2_headers_py.
 */
#ifndef RLM_DECODE_WALK_H
#define RLM_DECODE_WALK_H

#define WALK_LOG_OVERHEAD 12
#define WALK_MIN_SIZE_FIELD 14

/* walk_v2_headers(buf, pos, end, position, total) -> (stop, headers): from buf[pos], which is at
 * byte `position` of an object of `total` bytes, every batch that lies whole in buf[:end] and in
 * the object, is v2 and has a header rlm.log.v2.parse_v2_header accepts: one tuple (pos, size,
 * base_offset, last_offset, leader_epoch, attributes, max_timestamp, producer_id, crc_ok) each.
 * It stops, at `stop`, before the first batch that is not: fewer than 12 bytes left, a size field
 * below the minimum, a batch running past end or total, another magic, a header the parser would
 * refuse (or whose last offset overflows an int64). */
static PyObject *walk_v2_headers(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "walk_v2_headers takes 5 arguments");
        return NULL;
    }
    int64_t pos, end, position, total;
    if (as_int64(args[1], &pos) || as_int64(args[2], &end) || as_int64(args[3], &position) ||
        as_int64(args[4], &total)) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    if (pos < 0 || end > (int64_t)view.len || pos > end) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "pos and end must lie in the buffer, pos <= end");
        return NULL;
    }
    PyObject *headers = PyList_New(0);
    if (headers == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    const unsigned char *d = (const unsigned char *)view.buf;
    int64_t p = pos;
    while (end - p >= WALK_LOG_OVERHEAD) {
        const unsigned char *h = d + p;
        int64_t size_field = (int32_t)be32(h + 8);
        if (size_field < WALK_MIN_SIZE_FIELD) {
            break;
        }
        int64_t size = size_field + WALK_LOG_OVERHEAD;
        if (position + (p - pos) + size > total || size > end - p || h[16] != 2 || size < V2_HEADER_SIZE) {
            break;
        }
        uint32_t attributes = ((uint32_t)h[21] << 8) | h[22];
        int64_t last_delta = (int32_t)be32(h + 23);
        int64_t count = (int32_t)be32(h + 57);
        int64_t base = (int64_t)be64(h);
        if (count < 0 || last_delta < 0 || (attributes & 0x07) > 4 || base > INT64_MAX - last_delta) {
            break;
        }
        int crc_ok = crc32c(h + 21, (Py_ssize_t)size - 21) == be32(h + 17);
        PyObject *header = Py_BuildValue("(LLLLiiLLO)", (long long)p, (long long)size, (long long)base,
                                         (long long)(base + last_delta), (int)(int32_t)be32(h + 12),
                                         (int)(int16_t)attributes, (long long)(int64_t)be64(h + 35),
                                         (long long)(int64_t)be64(h + 43), crc_ok ? Py_True : Py_False);
        if (header == NULL || PyList_Append(headers, header) < 0) {
            Py_XDECREF(header);
            Py_DECREF(headers);
            PyBuffer_Release(&view);
            return NULL;
        }
        Py_DECREF(header);
        p += size;
    }
    PyBuffer_Release(&view);
    PyObject *result = Py_BuildValue("(LN)", (long long)p, headers);
    return result;
}

#endif
