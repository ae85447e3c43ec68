/*
 * The payloads of compressed v2 batches decompressed for the log walk (_decode_log.h): the frames
 * Kafka's clients write, walked here in C, each codec's library called for the compressed bytes
 * alone. Part of rlm.log._decode (included by _decode_log.h).
 *
 * What is decided here is what rlm.log.codecs.PLAIN_DECOMPRESSORS decides (the Python reference
 * of this fast path, itself checked against rlm.log.codecs.decompress): the same output for the
 * same frame, and a payload framed any other way (or one its library refuses) is given up on, so
 * that the reference says what is wrong. The libraries are the Python ones the reference uses,
 * passed in (rlm.log.codecs.plain_calls) as a tuple of 5:
 *
 *   0  isal_zlib.decompressobj          gzip: one member, nothing after it
 *   1  cramjam.snappy.decompress_raw_into  snappy: each block of a xerial stream
 *   2  lz4.frame.decompress             lz4: one frame of Kafka's descriptor
 *   3  zstandard.frame_content_size     zstd: one frame declaring its size...
 *   4  ZstdDecompressor.decompress      ...decompressed, nothing after it
 */
#ifndef RLM_DECODE_CODECS_H
#define RLM_DECODE_CODECS_H

/* rlm.log.codecs.DEFAULT_MAX_SIZE: the largest payload output accepted. */
#define PLAIN_MAX_SIZE ((int64_t)256 << 20)

static PyObject *str_decompress, *str_eof, *str_unused_data, *str_release, *kw_allow_extra_data;

static int codecs_init(void) {
    str_decompress = PyUnicode_InternFromString("decompress");
    str_eof = PyUnicode_InternFromString("eof");
    str_unused_data = PyUnicode_InternFromString("unused_data");
    str_release = PyUnicode_InternFromString("release");
    kw_allow_extra_data = Py_BuildValue("(s)", "allow_extra_data");
    return str_decompress && str_eof && str_unused_data && str_release && kw_allow_extra_data ? 0 : -1;
}

/* A decompressed payload: the bytes of `held` (a buffer object's view) or of the scratch memory. */
typedef struct {
    unsigned char *scratch; /* PyMem_Raw memory of scratch_cap bytes, for outputs built here */
    Py_ssize_t scratch_cap;
    Py_buffer held;
    int holding;
    const unsigned char *at;
    Py_ssize_t len;
} plain_out_t;

static void plain_out_release(plain_out_t *o) {
    if (o->holding) {
        PyBuffer_Release(&o->held);
        o->holding = 0;
    }
}

static void plain_out_free(plain_out_t *o) {
    plain_out_release(o);
    PyMem_RawFree(o->scratch); /* raw: grown without the GIL too (_decode_native.h) */
    o->scratch = NULL;
    o->scratch_cap = 0;
}

/* A memoryview of n bytes at `at` for a library call. */
static PyObject *view_of(const unsigned char *at, int64_t n, int flags) {
    return PyMemoryView_FromMemory((char *)at, (Py_ssize_t)n, flags);
}

/* Drop a view given to a library: released first when the library kept a reference to it, so
 * that what it kept reads as released rather than as memory that may be gone. 0, or -1 with an
 * error set (still exported). */
static int drop_view(PyObject *view) {
    if (Py_REFCNT(view) > 1) {
        PyObject *done = PyObject_VectorcallMethod(str_release, &view, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        if (done == NULL) {
            Py_DECREF(view);
            return -1;
        }
        Py_DECREF(done);
    }
    Py_DECREF(view);
    return 0;
}

/* call(view of the n bytes at `at`, extra) (no extra when NULL; extra passed by the one keyword
 * of kwnames when given), the view dropped after it; NULL with an error set when it raises. */
static PyObject *call_on_view(PyObject *call, const unsigned char *at, int64_t n, PyObject *extra,
                              PyObject *kwnames) {
    PyObject *view = view_of(at, n, PyBUF_READ);
    if (view == NULL) {
        return NULL;
    }
    PyObject *args[3] = {NULL, view, extra};
    size_t positional = extra != NULL && kwnames == NULL ? 2 : 1;
    PyObject *result = PyObject_Vectorcall(call, args + 1, positional | PY_VECTORCALL_ARGUMENTS_OFFSET, kwnames);
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    if (drop_view(view) < 0) {
        Py_XDECREF(result);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(traceback);
        return NULL;
    }
    PyErr_Restore(type, value, traceback);
    return result;
}

/* Hold the bytes of a library's result (a new reference, taken). */
static int hold(PyObject *result, plain_out_t *o) {
    if (result == NULL) {
        return -1;
    }
    int rc = PyObject_GetBuffer(result, &o->held, PyBUF_SIMPLE);
    Py_DECREF(result);
    if (rc < 0) {
        return -1;
    }
    o->holding = 1;
    o->at = (const unsigned char *)o->held.buf;
    o->len = o->held.len;
    return 0;
}

/* gzip, as _gzip_plain: decompressobj(31).decompress(payload, max + 1), at its end, nothing left. */
static const char *plain_gzip(PyObject *calls, const unsigned char *at, int64_t n, plain_out_t *o) {
    PyObject *wbits = PyLong_FromLong(31);
    PyObject *inflater = wbits == NULL ? NULL : PyObject_CallOneArg(PyTuple_GET_ITEM(calls, 0), wbits);
    Py_XDECREF(wbits);
    if (inflater == NULL) {
        return NULL;
    }
    PyObject *method = PyObject_GetAttr(inflater, str_decompress);
    PyObject *limit = method == NULL ? NULL : PyLong_FromLongLong(PLAIN_MAX_SIZE + 1);
    PyObject *out = limit == NULL ? NULL : call_on_view(method, at, n, limit, NULL);
    Py_XDECREF(limit);
    Py_XDECREF(method);
    const char *why = NULL;
    if (out != NULL) {
        PyObject *eof = PyObject_GetAttr(inflater, str_eof);
        PyObject *unused = eof == NULL ? NULL : PyObject_GetAttr(inflater, str_unused_data);
        int at_end = unused == NULL ? -1 : PyObject_IsTrue(eof);
        Py_ssize_t left = at_end < 0 ? -1 : PyObject_Length(unused);
        Py_ssize_t size = left < 0 ? -1 : PyObject_Length(out);
        Py_XDECREF(eof);
        Py_XDECREF(unused);
        if (size < 0) {
            Py_CLEAR(out);
        } else if (!at_end || left != 0 || size > PLAIN_MAX_SIZE) {
            why = "gzip: not one whole member";
            Py_CLEAR(out);
        }
    }
    Py_DECREF(inflater);
    if (why == NULL && hold(out, o) < 0) {
        return NULL;
    }
    return why;
}

/* The length a raw snappy block declares (its varint preamble), or -1 when not plainly read. */
static int64_t snappy_declared(const unsigned char *at, int64_t n) {
    uint64_t value = 0;
    for (int i = 0; i < 5 && i < n; i++) {
        value |= (uint64_t)(at[i] & 0x7F) << (7 * i);
        if (!(at[i] & 0x80)) {
            return value <= UINT32_MAX ? (int64_t)value : -1;
        }
    }
    return -1;
}

static const unsigned char XERIAL_MAGIC[8] = {0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0};
#define XERIAL_HEADER_SIZE 16

/* The xerial blocks of a snappy payload, as _snappy_plain walks them, adding up the lengths they
 * declare into *total; with `into` (`out` then has room for them all), each block decompressed
 * into its place in `out`. NULL, or why it gave up (or NULL with an error set). */
static const char *xerial_blocks(const unsigned char *at, int64_t n, int64_t *total, PyObject *into,
                                 unsigned char *out) {
    if (n < XERIAL_HEADER_SIZE || memcmp(at, XERIAL_MAGIC, 8) != 0) {
        return "snappy: not a xerial stream";
    }
    int64_t pos = XERIAL_HEADER_SIZE, sum = 0;
    while (pos < n) {
        if (n - pos >= 8 && memcmp(at + pos, XERIAL_MAGIC, 8) == 0) {
            return "snappy: a repeated header";
        }
        if (n - pos < 4) {
            return "snappy: a truncated block length";
        }
        int64_t length = (int32_t)be32(at + pos);
        pos += 4;
        if (length <= 0 || length > n - pos) {
            return "snappy: a block length out of range";
        }
        int64_t declared = snappy_declared(at + pos, length);
        if (declared < 0 || (sum += declared) > PLAIN_MAX_SIZE) {
            return "snappy: a block's length not plainly declared";
        }
        if (into != NULL) {
            PyObject *dest = view_of(out + sum - declared, declared, PyBUF_WRITE);
            PyObject *written = dest == NULL ? NULL : call_on_view(into, at + pos, length, dest, NULL);
            if (dest != NULL && drop_view(dest) < 0) {
                Py_CLEAR(written);
            }
            if (written == NULL) {
                return NULL;
            }
            int64_t got = PyLong_AsLongLong(written);
            Py_DECREF(written);
            if (got != declared) {
                return PyErr_Occurred() ? NULL : "snappy: a block shorter than declared";
            }
        }
        pos += length;
    }
    *total = sum;
    return NULL;
}

/* snappy, as _snappy_plain: the blocks of a xerial stream, one after the other, into the scratch
 * memory (sized first by the lengths they declare). */
static const char *plain_snappy(PyObject *calls, const unsigned char *at, int64_t n, plain_out_t *o) {
    int64_t total = 0;
    const char *why = xerial_blocks(at, n, &total, NULL, NULL);
    if (why != NULL) {
        return why;
    }
    if (total > o->scratch_cap || o->scratch == NULL) {
        Py_ssize_t cap = (Py_ssize_t)(total > 2 * o->scratch_cap ? total : 2 * o->scratch_cap);
        cap = cap < 64 ? 64 : cap;
        unsigned char *grown = PyMem_RawRealloc(o->scratch, (size_t)cap);
        if (grown == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        o->scratch = grown;
        o->scratch_cap = cap;
    }
    why = xerial_blocks(at, n, &total, PyTuple_GET_ITEM(calls, 1), o->scratch);
    o->at = o->scratch;
    o->len = (Py_ssize_t)total;
    return why;
}

static uint32_t le32(const unsigned char *at) {
    return (uint32_t)at[0] | (uint32_t)at[1] << 8 | (uint32_t)at[2] << 16 | (uint32_t)at[3] << 24;
}

#define LZ4_KAFKA_BLOCK (64 * 1024)

/* Kafka's lz4 frame, as _lz4_plain walks it: its descriptor (independent 64 KiB blocks, no
 * checksums, no content size), blocks of at most 64 KiB (a block's size after the 4 bytes
 * giving it, its high bit marking a block stored as it is), an end mark at the end of the
 * payload. NULL (*blocks set), or why not. */
static const char *kafka_lz4_frame(const unsigned char *at, int64_t n, int64_t *blocks) {
    static const unsigned char kafka_header[7] = {0x04, 0x22, 0x4D, 0x18, 0x60, 0x40, 0x82};
    if (n < 7 || memcmp(at, kafka_header, 7) != 0) {
        return "lz4: not Kafka's frame descriptor";
    }
    int64_t pos = 7, count = 0;
    for (;;) {
        if (n - pos < 4) {
            return "lz4: no end mark";
        }
        uint32_t size = le32(at + pos);
        pos += 4;
        if (size == 0) {
            break;
        }
        size &= 0x7FFFFFFFu;
        if (size == 0) {
            /* Kafka's end mark with the stored bit (liblz4's empty block): Kafka ends the frame
             * there, liblz4 reads on; the Python path (_lz4_plain's fallback) does as Kafka does. */
            return "lz4: an end mark with the stored bit";
        }
        if (size > LZ4_KAFKA_BLOCK) {
            return "lz4: a block larger than the frame's";
        }
        pos += size;
        count++;
    }
    if (pos != n || count * LZ4_KAFKA_BLOCK > PLAIN_MAX_SIZE) {
        return "lz4: not one frame alone";
    }
    *blocks = count;
    return NULL;
}

/* lz4, as _lz4_plain: one frame as Kafka writes it (kafka_lz4_frame), by the library's call. */
static const char *plain_lz4(PyObject *calls, const unsigned char *at, int64_t n, plain_out_t *o) {
    int64_t blocks;
    const char *why = kafka_lz4_frame(at, n, &blocks);
    if (why != NULL) {
        return why;
    }
    hold(call_on_view(PyTuple_GET_ITEM(calls, 2), at, n, NULL, NULL), o); /* an error stays set */
    return NULL;
}

/* zstd, as _zstd_plain: one frame declaring a size of 1 byte up to the limit, nothing after it. */
static const char *plain_zstd(PyObject *calls, const unsigned char *at, int64_t n, plain_out_t *o) {
    static const unsigned char magic[4] = {0x28, 0xB5, 0x2F, 0xFD};
    if (n < 4 || memcmp(at, magic, 4) != 0) {
        return "zstd: no frame magic";
    }
    PyObject *declared = call_on_view(PyTuple_GET_ITEM(calls, 3), at, n, NULL, NULL);
    if (declared == NULL) {
        return NULL;
    }
    long long size = PyLong_AsLongLong(declared);
    Py_DECREF(declared);
    if (size == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (size <= 0 || size > PLAIN_MAX_SIZE) {
        return "zstd: no size declared in range";
    }
    hold(call_on_view(PyTuple_GET_ITEM(calls, 4), at, n, Py_False, kw_allow_extra_data), o); /* an error stays set */
    return NULL;
}

/* The payload of n bytes at `at` of a batch compressed with codec (1-4) decompressed into *o (its
 * bytes at o->at, o->len; plain_out_release once read). NULL, or why it gave up; or NULL with a
 * Python error set (a library raised: the caller gives up on the batch as well). */
static const char *plain_decompress(PyObject *calls, int codec, const unsigned char *at, int64_t n, plain_out_t *o) {
    switch (codec) {
    case 1:
        return plain_gzip(calls, at, n, o);
    case 2:
        return plain_snappy(calls, at, n, o);
    case 3:
        return plain_lz4(calls, at, n, o);
    case 4:
        return plain_zstd(calls, at, n, o);
    default:
        return "not a compression codec";
    }
}

/* The codec and the payload of the tests' calls (args[0], args[1]): 0 (the payload held), or -1. */
static int codec_and_payload(PyObject *const *args, long *codec, Py_buffer *payload) {
    *codec = PyLong_AsLong(args[0]);
    if (*codec == -1 && PyErr_Occurred()) {
        return -1;
    }
    return PyObject_GetBuffer(args[1], payload, PyBUF_SIMPLE);
}

/* decompress_plain(calls, codec, payload) -> bytes: plain_decompress alone, for the tests: the
 * decompressed payload, or ValueError when it gives up (or what a library raised). */
static PyObject *decompress_plain(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 3 || !PyTuple_CheckExact(args[0]) || PyTuple_GET_SIZE(args[0]) != 5) {
        PyErr_SetString(PyExc_TypeError, "takes calls (a tuple of 5), codec, payload");
        return NULL;
    }
    long codec;
    Py_buffer payload;
    if (codec_and_payload(args + 1, &codec, &payload) < 0) {
        return NULL;
    }
    plain_out_t out = {NULL, 0, {0}, 0, NULL, 0};
    const char *why = plain_decompress(args[0], (int)codec, payload.buf, payload.len, &out);
    PyObject *result = NULL;
    if (why != NULL) {
        PyErr_SetString(PyExc_ValueError, why);
    } else if (!PyErr_Occurred()) {
        result = PyBytes_FromStringAndSize((const char *)out.at, out.len);
    }
    plain_out_free(&out);
    PyBuffer_Release(&payload);
    return result;
}

#include "_decode_native.h"

#endif
