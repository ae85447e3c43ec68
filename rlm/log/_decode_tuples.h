/*
 * The records of a v2 batch as Record tuples (decode_records, decode_batch_records). Part of
 * rlm.log._decode (included by _decode.c after its record parsing); the Python reference is
 * rlm.log.v2._decode_records.
 */
#ifndef RLM_DECODE_TUPLES_H
#define RLM_DECODE_TUPLES_H

/* -- Record tuples ----------------------------------------------------------------------------- */

static PyObject *blob_object(const blob_t *blob) {
    if (blob->len < 0) {
        Py_RETURN_NONE;
    }
    return PyBytes_FromStringAndSize((const char *)blob->at, blob->len);
}

static PyObject *headers_object(const batch_t *b, const record_t *r) {
    PyObject *headers = PyTuple_New(r->header_count);
    if (headers == NULL || r->header_count == 0) {
        return headers;
    }
    Py_ssize_t p = r->headers_at;
    for (int32_t i = 0; i < r->header_count; i++) {
        blob_t key = {NULL, 0}, value = {NULL, 0};
        read_header(b->d, r->end, &p, &key, &value);
        PyObject *name = PyUnicode_DecodeUTF8((const char *)key.at, key.len, NULL);
        if (name == NULL) {
            Py_DECREF(headers);
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                PyErr_Clear(); /* the caller gives up on this record */
            }
            return NULL;
        }
        PyObject *pair = PyTuple_New(2);
        PyObject *val = pair == NULL ? NULL : blob_object(&value);
        if (val == NULL) {
            Py_XDECREF(pair);
            Py_DECREF(name);
            Py_DECREF(headers);
            return NULL;
        }
        PyTuple_SET_ITEM(pair, 0, name);
        PyTuple_SET_ITEM(pair, 1, val);
        PyTuple_SET_ITEM(headers, i, pair);
    }
    return headers;
}

/* A Record (a tuple subclass of 5 fields), built as tuple.__new__(Record, fields) builds it. */
static PyObject *record_object(PyTypeObject *type, const batch_t *b, const record_t *r) {
    PyObject *items[5];
    items[0] = PyLong_FromLongLong((long long)r->offset);
    items[1] = PyLong_FromLongLong((long long)r->timestamp);
    items[2] = blob_object(&r->key);
    items[3] = blob_object(&r->value);
    items[4] = headers_object(b, r);
    PyObject *record = NULL;
    if (items[0] && items[1] && items[2] && items[3] && items[4]) {
        record = type->tp_alloc(type, 5);
    }
    if (record == NULL) {
        for (int k = 0; k < 5; k++) {
            Py_XDECREF(items[k]);
        }
        return NULL;
    }
    for (int k = 0; k < 5; k++) {
        PyTuple_SET_ITEM(record, k, items[k]);
    }
    return record;
}

/* decode_records(record_type, data, pos, end, count, base_offset, base_ts, log_append)
 *     -> list[record_type]
 * decode_batch_records(record_type, buf, pos, verify_crc) -> list[record_type]
 *
 * The count records of data[pos:end] (or of the uncompressed v2 batch at buf[pos:]), as
 * rlm.log.v2._decode_records returns them. */
static PyObject *records_common(PyObject *const *args, Py_ssize_t nargs, int whole_batch) {
    if (nargs != (whole_batch ? 4 : 8)) {
        PyErr_Format(PyExc_TypeError, "takes %d arguments", whole_batch ? 4 : 8);
        return NULL;
    }
    if (!PyType_Check(args[0]) || !PyType_IsSubtype((PyTypeObject *)args[0], &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "record_type must be a tuple subclass");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)args[0];
    Py_buffer view;
    batch_t b;
    Py_ssize_t pos;
    int64_t count = 0;
    if (any_batch_args(args + 1, whole_batch, &view, &b, &pos, &count) < 0) {
        return NULL;
    }
    Py_ssize_t bound = (b.end - pos) / MIN_RECORD_BYTES + 1;
    PyObject *out = PyList_New(0);
    const char *why = NULL;
    int64_t i = 0;
    if (out != NULL && count > 0) {
        /* room for every record the data can hold, whatever count claims */
        Py_ssize_t room = count < bound ? (Py_ssize_t)count : bound;
        PyObject *sized = PyList_New(room);
        if (sized == NULL) {
            Py_CLEAR(out);
        } else {
            Py_SETREF(out, sized);
        }
    }
    for (; out != NULL && i < count; i++) {
        record_t r;
        why = parse_record(&b, &pos, &r);
        if (why != NULL) {
            break;
        }
        PyObject *record = record_object(type, &b, &r);
        if (record == NULL) {
            if (!PyErr_Occurred()) {
                why = "a header key is not UTF-8";
            }
            break;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)i, record); /* i < room: each record holds >= 7 bytes */
    }
    if (out != NULL && why == NULL && !PyErr_Occurred() && pos != b.end) {
        why = "bytes left after the declared records";
    }
    PyBuffer_Release(&view);
    if (out == NULL || why != NULL || PyErr_Occurred()) {
        Py_XDECREF(out); /* the unset tail of the list is NULL, which its deallocator skips */
        return why != NULL && !PyErr_Occurred() ? gave_up(i, why) : NULL;
    }
    return out;
}

static PyObject *decode_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    return records_common(args, nargs, 0);
}

static PyObject *decode_batch_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    return records_common(args, nargs, 1);
}

#endif
