/*
 * rlm.log._scan: the inner loops of a timestamp search, and the header walk of a stream's chunks
 * (with the view of batches that lie end to end), in C.
 *
 * Each has a pure-Python reference (rlm/log/scan.py) that defines what it answers; these only
 * answer faster. None ever reports corruption itself: on anything unexpected (a field out of
 * range, a read past the buffer, an arithmetic overflow) find_record raises ValueError, and
 * skip_below and v2_headers stop, and the Python code then takes over at that point and says what
 * is wrong.
 * Every read is bounds-checked against the buffer: the bytes come from files on disk and remote
 * objects, and may be anything.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define LOG_OVERHEAD 12
#define MAGIC_OFFSET 16
#define V2_HEADER_SIZE 61
#define MIN_SIZE_FIELD 14
#define LAST_OFFSET_DELTA 23
#define MAX_TIMESTAMP 35

static uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static int16_t be16(const unsigned char *p) {
    return (int16_t)(((uint16_t)p[0] << 8) | (uint16_t)p[1]);
}

static uint64_t be64(const unsigned char *p) {
    return ((uint64_t)be32(p) << 32) | (uint64_t)be32(p + 4);
}

/* An unsigned varint of at most max_bytes at *pos, as rlm.log.varint.read_uvarint reads it; the
 * bits a 64-bit value cannot hold are dropped (callers mask to 32 or 64 bits, as Kafka does).
 * Returns -1 when it runs past len or is longer than max_bytes. */
static int read_uvarint(const unsigned char *d, Py_ssize_t len, Py_ssize_t *pos, int max_bytes,
                        uint64_t *out) {
    uint64_t result = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes; i++) {
        Py_ssize_t at = *pos + i;
        if (at >= len) {
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

static int64_t zigzag(uint64_t u) {
    return (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
}

static int as_int64(PyObject *obj, int64_t *out) {
    long long value = PyLong_AsLongLong(obj);
    if (value == -1 && PyErr_Occurred()) {
        return -1;
    }
    *out = (int64_t)value;
    return 0;
}

static PyObject *not_plain(const char *what) {
    PyErr_SetString(PyExc_ValueError, what);
    return NULL;
}

/* find_record(data, pos, end, count, base_offset, base_timestamp, log_append, timestamp,
 *             start_offset) -> (timestamp, offset) | None
 *
 * The records of a v2 batch are data[pos:end] (decompressed); the first whose timestamp is
 * >= timestamp and whose offset is >= start_offset, reading each record's length, timestamp
 * delta and offset delta only. Raises ValueError on anything but well-formed records. */
static PyObject *find_record(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "find_record takes 9 arguments");
        return NULL;
    }
    int64_t pos, end, count, base_offset, base_ts, timestamp, start_offset;
    if (as_int64(args[1], &pos) || as_int64(args[2], &end) || as_int64(args[3], &count) ||
        as_int64(args[4], &base_offset) || as_int64(args[5], &base_ts) ||
        as_int64(args[7], &timestamp) || as_int64(args[8], &start_offset)) {
        return NULL;
    }
    int log_append = PyObject_IsTrue(args[6]);
    if (log_append < 0) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    const unsigned char *d = (const unsigned char *)view.buf;
    Py_ssize_t len = view.len;
    const char *problem = NULL;
    int found = 0;
    int64_t found_ts = 0, found_offset = 0;
    if (pos < 0 || end < 0) {
        problem = "negative position";
        count = 0;
    }
    Py_ssize_t p = (Py_ssize_t)pos;
    for (int64_t i = 0; i < count; i++) {
        uint64_t u;
        if (p >= end) {
            problem = "fewer records than declared";
            break;
        }
        if (read_uvarint(d, len, &p, 5, &u) < 0) {
            problem = "bad record length";
            break;
        }
        int64_t length = zigzag(u & 0xFFFFFFFFu);
        int64_t rec_end = (int64_t)p + length;
        if (length < 6 || rec_end > end) {
            problem = "record length out of range";
            break;
        }
        p += 1; /* record attributes: unused */
        if (read_uvarint(d, len, &p, 10, &u) < 0) {
            problem = "bad timestamp delta";
            break;
        }
        int64_t ts = base_ts;
        if (!log_append && __builtin_add_overflow(base_ts, zigzag(u), &ts)) {
            problem = "timestamp overflow";
            break;
        }
        if (read_uvarint(d, len, &p, 5, &u) < 0) {
            problem = "bad offset delta";
            break;
        }
        int64_t offset;
        if (__builtin_add_overflow(base_offset, zigzag(u & 0xFFFFFFFFu), &offset)) {
            problem = "offset overflow";
            break;
        }
        if (ts >= timestamp && offset >= start_offset) {
            found = 1;
            found_ts = ts;
            found_offset = offset;
            break;
        }
        p = (Py_ssize_t)rec_end;
    }
    PyBuffer_Release(&view);
    if (problem != NULL) {
        return not_plain(problem);
    }
    if (!found) {
        Py_RETURN_NONE;
    }
    return Py_BuildValue("(LL)", (long long)found_ts, (long long)found_offset);
}

/* skip_below(data, pos, limit, timestamp, start_offset) -> int
 *
 * From pos, step over the whole v2 batches (within data and below limit) whose max timestamp is
 * below timestamp or whose last offset is below start_offset, judged by their size, magic, last
 * offset delta and max timestamp; return where the first batch that is not such a batch starts
 * (pos itself when there is none to skip). */
static PyObject *skip_below(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "skip_below takes 5 arguments");
        return NULL;
    }
    int64_t pos, limit, timestamp, start_offset;
    if (as_int64(args[1], &pos) || as_int64(args[2], &limit) || as_int64(args[3], &timestamp) ||
        as_int64(args[4], &start_offset)) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    const unsigned char *d = (const unsigned char *)view.buf;
    int64_t len = (int64_t)view.len;
    while (pos >= 0 && limit - pos > MAGIC_OFFSET + 1 && pos + V2_HEADER_SIZE <= len) {
        const unsigned char *h = d + pos;
        int64_t base = (int64_t)be64(h);
        int64_t size = (int32_t)be32(h + 8);
        if (size < MIN_SIZE_FIELD) {
            break;
        }
        int64_t total = LOG_OVERHEAD + size;
        if (pos + total > limit || h[MAGIC_OFFSET] != 2 || total < V2_HEADER_SIZE) {
            break;
        }
        int64_t last_delta = (int32_t)be32(h + LAST_OFFSET_DELTA);
        int64_t max_ts = (int64_t)be64(h + MAX_TIMESTAMP);
        int64_t last_offset;
        if (last_delta < 0 || __builtin_add_overflow(base, last_delta, &last_offset)) {
            break;
        }
        if (max_ts >= timestamp && last_offset >= start_offset) {
            break;
        }
        pos += total;
    }
    PyBuffer_Release(&view);
    return PyLong_FromLongLong((long long)pos);
}

/* v2_headers(data, pos, at, budget, header_type) -> (headers, pos)
 *
 * The headers of the whole v2 batches of data from pos, one after the other, as parse_v2_header
 * reads them, each a header_type (BatchHeader: a tuple of its 14 fields) whose position is at
 * plus its distance from pos; taken until budget bytes are (the batch that reaches it included).
 * Returns them and the position after the last. Stops, saying nothing, before a batch cut by the
 * data's end, a batch that is not v2, and anything parse_v2_header refuses (or a last offset past
 * int64): the Python loop reads that batch. */
static PyObject *v2_headers(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "v2_headers takes 5 arguments");
        return NULL;
    }
    int64_t pos, at, budget;
    if (as_int64(args[1], &pos) || as_int64(args[2], &at) || as_int64(args[3], &budget)) {
        return NULL;
    }
    if (!PyType_Check(args[4]) || !PyType_IsSubtype((PyTypeObject *)args[4], &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "v2_headers: header_type must be a tuple type");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)args[4];
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    PyObject *found = PyList_New(0);
    if (found == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    const unsigned char *d = (const unsigned char *)view.buf;
    const int64_t len = (int64_t)view.len, start = pos;
    while (pos >= 0 && pos - start < budget && len - pos >= V2_HEADER_SIZE) {
        const unsigned char *h = d + pos;
        int64_t length = (int32_t)be32(h + 8);
        int64_t total = LOG_OVERHEAD + length;
        if (length < MIN_SIZE_FIELD || total > len - pos || h[MAGIC_OFFSET] != 2 || total < V2_HEADER_SIZE) {
            break;
        }
        int64_t base = (int64_t)be64(h);
        int16_t attributes = be16(h + 21);
        int32_t last_delta = (int32_t)be32(h + LAST_OFFSET_DELTA);
        int32_t count = (int32_t)be32(h + 57);
        int64_t last;
        if (count < 0 || last_delta < 0 || (attributes & 0x07) > 4 ||
            __builtin_add_overflow(base, (int64_t)last_delta, &last)) {
            break;
        }
        PyObject *header = type->tp_alloc(type, 14);
        if (header == NULL) {
            goto failed;
        }
        PyObject *fields[14] = {
            PyLong_FromLongLong((long long)(at + (pos - start))),
            PyLong_FromLongLong((long long)base),
            PyLong_FromLongLong((long long)last),
            PyLong_FromLongLong((long long)total),
            PyLong_FromLong((long)(int32_t)be32(h + 12)), /* partition leader epoch */
            PyLong_FromLong(2),
            PyLong_FromUnsignedLong((unsigned long)be32(h + 17)), /* crc */
            PyLong_FromLong((long)attributes),
            PyLong_FromLongLong((long long)(int64_t)be64(h + 27)), /* base timestamp */
            PyLong_FromLongLong((long long)(int64_t)be64(h + MAX_TIMESTAMP)),
            PyLong_FromLongLong((long long)(int64_t)be64(h + 43)), /* producer id */
            PyLong_FromLong((long)be16(h + 51)),                  /* producer epoch */
            PyLong_FromLong((long)(int32_t)be32(h + 53)),         /* base sequence */
            PyLong_FromLong((long)count),
        };
        int missing = 0;
        for (int i = 0; i < 14; i++) {
            missing |= fields[i] == NULL;
            PyTuple_SET_ITEM(header, i, fields[i]);
        }
        if (missing || PyList_Append(found, header) < 0) {
            Py_DECREF(header);
            goto failed;
        }
        Py_DECREF(header);
        pos += total;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(NL)", found, (long long)pos);
failed:
    Py_DECREF(found);
    PyBuffer_Release(&view);
    return NULL;
}

/* adjoining(views) -> memoryview | None
 *
 * One view of all the bytes of a list of views, where they are memoryviews of one object lying end
 * to end in it, in order (the batches of a chunk, say): a slice of that object's buffer, no copy.
 * None otherwise (the caller joins them). */
static PyObject *adjoining(PyObject *module, PyObject *views) {
    (void)module;
    if (!PyList_Check(views)) {
        PyErr_SetString(PyExc_TypeError, "adjoining takes a list of memoryviews");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(views);
    PyObject *owner = NULL;
    const char *start = NULL, *end = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(views, i);
        if (!PyMemoryView_Check(item)) {
            Py_RETURN_NONE;
        }
        Py_buffer b;
        if (PyObject_GetBuffer(item, &b, PyBUF_SIMPLE) < 0) { /* released, or not contiguous bytes */
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        const char *at = (const char *)b.buf;
        Py_ssize_t len = b.len;
        PyBuffer_Release(&b);
        PyObject *of = PyMemoryView_GET_BUFFER(item)->obj;
        if (of == NULL || (i > 0 && (of != owner || at != end))) {
            Py_RETURN_NONE;
        }
        if (i == 0) {
            owner = of;
            start = at;
        }
        end = at + len;
    }
    if (owner == NULL) {
        Py_RETURN_NONE;
    }
    PyObject *whole = PyMemoryView_FromObject(owner);
    if (whole == NULL) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    Py_buffer *w = PyMemoryView_GET_BUFFER(whole);
    const char *base = (const char *)w->buf;
    PyObject *result = Py_None;
    if (w->ndim == 1 && w->itemsize == 1 && (w->strides == NULL || w->strides[0] == 1) && w->suboffsets == NULL &&
        start >= base && end <= base + w->len) {
        result = PySequence_GetSlice(whole, start - base, end - base);
    } else {
        Py_INCREF(result);
    }
    Py_DECREF(whole);
    return result;
}

static PyMethodDef methods[] = {
    {"find_record", (PyCFunction)(void (*)(void))find_record, METH_FASTCALL,
     "First record of a v2 batch's records at or after a timestamp and an offset."},
    {"skip_below", (PyCFunction)(void (*)(void))skip_below, METH_FASTCALL,
     "Position of the first v2 batch a timestamp search cannot step over."},
    {"v2_headers", (PyCFunction)(void (*)(void))v2_headers, METH_FASTCALL,
     "Headers of the whole v2 batches from a position, up to a number of bytes."},
    {"adjoining", (PyCFunction)adjoining, METH_O, "One view of views lying end to end in one object, or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "rlm.log._scan",
    .m_doc = "The inner loops of a timestamp search and of a chunk's batch headers, in C.",
    .m_size = 0,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__scan(void) {
    return PyModule_Create(&module_def);
}
