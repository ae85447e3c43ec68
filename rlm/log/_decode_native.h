/*
 * The payloads of zstd and lz4 batches decompressed without the GIL, for the log walk
 * (_decode_log.h). Part of rlm.log._decode (included by _decode_codecs.h).
 *
 * The Python libraries of _decode_codecs.h each need the GIL taken for their call (and give it up
 * inside it): a walk over a group of batches then hands the GIL over several times a batch, and a
 * stream's encoders and the event loop wait on each other for it. Here:
 *
 *   zstd    the system's libzstd (libzstd.so.1), loaded at import with dlopen, as systemd loads
 *           it: ZSTD_decompressDCtx and the frame functions of zstd's stable API;
 *   lz4     the system's liblz4 (liblz4.so.1): LZ4_decompress_safe, a block at a time, Kafka's
 *           frame walked here.
 *
 * A library that is not there leaves its codec to the Python call (set_native says which are
 * here). gzip stays with ISA-L's Python call (about 1.7 times as fast as zlib's inflate), snappy
 * with cramjam's: a table-driven decoder written here walked snappy batches at nine tenths of its
 * speed, and range streams gained nothing clear from it.
 *
 * Each decides as its Python reference (_decode_codecs.h) decides, or gives up: the walk then stops
 * before the batch and the caller's reference decodes it (and says what is wrong). No frame is
 * decoded here into other bytes than there: the tests check native against the Python reference.
 */
#ifndef RLM_DECODE_NATIVE_H
#define RLM_DECODE_NATIVE_H

#include <dlfcn.h>

/* zstd's stable API (zstd.h), by the names of its symbols. */
#define ZSTD_CONTENTSIZE_ERROR (0ULL - 2)
typedef void *(*zstd_create_dctx_t)(void);
typedef size_t (*zstd_free_dctx_t)(void *);
typedef size_t (*zstd_decompress_dctx_t)(void *, void *, size_t, const void *, size_t);
typedef unsigned long long (*zstd_content_size_t)(const void *, size_t);
typedef size_t (*zstd_frame_size_t)(const void *, size_t);
typedef unsigned (*zstd_is_error_t)(size_t);
/* lz4's (lz4.h). */
typedef int (*lz4_decompress_safe_t)(const char *, char *, int, int);

static struct {
    zstd_create_dctx_t zstd_create_dctx;
    zstd_free_dctx_t zstd_free_dctx;
    zstd_decompress_dctx_t zstd_decompress_dctx;
    zstd_content_size_t zstd_content_size;
    zstd_frame_size_t zstd_frame_size;
    zstd_is_error_t zstd_is_error;
    lz4_decompress_safe_t lz4_decompress_safe;
    int zstd, lz4;   /* loaded */
    int enabled;     /* set_native: off, every codec goes to the Python calls */
} native = {0};

/* dlsym of each name into its slot; 1 when all were found. */
static int native_symbols(void *lib, const char *const *names, void **slots, int n) {
    for (int i = 0; i < n; i++) {
        slots[i] = lib == NULL ? NULL : dlsym(lib, names[i]);
        if (slots[i] == NULL) {
            return 0;
        }
    }
    return 1;
}

/* Load the libraries there are (at import; the handles are kept for the process). */
static void native_init(void) {
    void *zstd = dlopen("libzstd.so.1", RTLD_NOW | RTLD_LOCAL);
    static const char *const zstd_names[] = {"ZSTD_createDCtx", "ZSTD_freeDCtx", "ZSTD_decompressDCtx",
                                             "ZSTD_getFrameContentSize", "ZSTD_findFrameCompressedSize",
                                             "ZSTD_isError"};
    void *zstd_slots[6];
    if (native_symbols(zstd, zstd_names, zstd_slots, 6)) {
        native.zstd_create_dctx = (zstd_create_dctx_t)zstd_slots[0];
        native.zstd_free_dctx = (zstd_free_dctx_t)zstd_slots[1];
        native.zstd_decompress_dctx = (zstd_decompress_dctx_t)zstd_slots[2];
        native.zstd_content_size = (zstd_content_size_t)zstd_slots[3];
        native.zstd_frame_size = (zstd_frame_size_t)zstd_slots[4];
        native.zstd_is_error = (zstd_is_error_t)zstd_slots[5];
        native.zstd = 1;
    } else if (zstd != NULL) {
        dlclose(zstd);
    }
    void *lz4 = dlopen("liblz4.so.1", RTLD_NOW | RTLD_LOCAL);
    static const char *const lz4_names[] = {"LZ4_decompress_safe"};
    void *lz4_slot[1];
    if (native_symbols(lz4, lz4_names, lz4_slot, 1)) {
        native.lz4_decompress_safe = (lz4_decompress_safe_t)lz4_slot[0];
        native.lz4 = 1;
    } else if (lz4 != NULL) {
        dlclose(lz4);
    }
    native.enabled = 1;
}

/* Whether the payloads of codec (1-4) are decompressed here. */
static int native_has(int codec) {
    if (!native.enabled) {
        return 0;
    }
    return (codec == 3 && native.lz4) || (codec == 4 && native.zstd);
}

/* What native decompression keeps from one batch to the next of a walk. */
typedef struct {
    void *zstd_dctx; /* made at the first zstd batch */
} native_state_t;

static void native_state_free(native_state_t *s) {
    if (s->zstd_dctx != NULL) {
        native.zstd_free_dctx(s->zstd_dctx);
        s->zstd_dctx = NULL;
    }
}

/* Room for n bytes in o's scratch memory (malloc'd: no GIL needed); 0, or -1. */
static int scratch_room(plain_out_t *o, int64_t n) {
    if (n <= o->scratch_cap && o->scratch != NULL) {
        return 0;
    }
    int64_t cap = n > 2 * (int64_t)o->scratch_cap ? n : 2 * (int64_t)o->scratch_cap;
    cap = cap < 64 ? 64 : cap;
    unsigned char *grown = PyMem_RawRealloc(o->scratch, (size_t)cap);
    if (grown == NULL) {
        return -1;
    }
    o->scratch = grown;
    o->scratch_cap = (Py_ssize_t)cap;
    return 0;
}

/* lz4, as plain_lz4: Kafka's frame (kafka_lz4_frame), each block into the scratch memory after
 * the last, a stored one copied. */
static const char *native_lz4(const unsigned char *at, int64_t n, plain_out_t *o) {
    int64_t blocks;
    const char *why = kafka_lz4_frame(at, n, &blocks);
    if (why != NULL) {
        return why;
    }
    if (scratch_room(o, blocks * LZ4_KAFKA_BLOCK) < 0) {
        return "lz4: no memory";
    }
    int64_t done = 0, pos = 7;
    for (int64_t i = 0; i < blocks; i++) {
        uint32_t size = le32(at + pos);
        uint32_t length = size & 0x7FFFFFFFu;
        pos += 4;
        if (size & 0x80000000u) {
            memcpy(o->scratch + done, at + pos, length);
            done += length;
        } else {
            int got = native.lz4_decompress_safe((const char *)at + pos, (char *)o->scratch + done, (int)length,
                                                 LZ4_KAFKA_BLOCK);
            if (got < 0) {
                return "lz4: a block does not decompress";
            }
            done += got;
        }
        pos += length;
    }
    o->at = o->scratch;
    o->len = (Py_ssize_t)done;
    return NULL;
}

/* zstd, as plain_zstd: one frame declaring a size of 1 byte up to the limit, nothing after it,
 * decompressed to exactly that size. */
static const char *native_zstd(const unsigned char *at, int64_t n, plain_out_t *o, native_state_t *s) {
    static const unsigned char magic[4] = {0x28, 0xB5, 0x2F, 0xFD};
    if (n < 4 || memcmp(at, magic, 4) != 0) {
        return "zstd: no frame magic";
    }
    unsigned long long size = native.zstd_content_size(at, (size_t)n);
    if (size == 0 || size >= ZSTD_CONTENTSIZE_ERROR || size > (unsigned long long)PLAIN_MAX_SIZE) {
        return "zstd: no size declared in range";
    }
    size_t frame = native.zstd_frame_size(at, (size_t)n);
    if (native.zstd_is_error(frame) || frame != (size_t)n) {
        return "zstd: not one frame alone";
    }
    if (s->zstd_dctx == NULL && (s->zstd_dctx = native.zstd_create_dctx()) == NULL) {
        return "zstd: no memory";
    }
    if (scratch_room(o, (int64_t)size) < 0) {
        return "zstd: no memory";
    }
    size_t got = native.zstd_decompress_dctx(s->zstd_dctx, o->scratch, (size_t)size, at, (size_t)n);
    if (native.zstd_is_error(got) || got != (size_t)size) {
        return "zstd: the frame does not decompress to its size";
    }
    o->at = o->scratch;
    o->len = (Py_ssize_t)size;
    return NULL;
}

/* The payload of n bytes at `at` of codec (native_has) decompressed into *o, without the GIL (nor
 * any call of the C API): NULL, or why it gave up. */
static const char *native_decompress(int codec, const unsigned char *at, int64_t n, plain_out_t *o,
                                     native_state_t *s) {
    switch (codec) {
    case 3:
        return native_lz4(at, n, o);
    case 4:
        return native_zstd(at, n, o, s);
    default:
        return "not decompressed here";
    }
}

/* decompress_native(codec, payload) -> bytes: native_decompress alone, for the tests: ValueError
 * when it gives up or the codec is not decompressed here. */
static PyObject *decompress_native(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "takes codec, payload");
        return NULL;
    }
    long codec;
    Py_buffer payload;
    if (codec_and_payload(args, &codec, &payload) < 0) {
        return NULL;
    }
    plain_out_t out = {NULL, 0, {0}, 0, NULL, 0};
    native_state_t state = {NULL};
    const char *why = "not decompressed here";
    if (native_has((int)codec)) {
        Py_BEGIN_ALLOW_THREADS
        why = native_decompress((int)codec, payload.buf, payload.len, &out, &state);
        Py_END_ALLOW_THREADS
    }
    PyObject *result = why != NULL ? PyErr_Format(PyExc_ValueError, "%s", why)
                                   : PyBytes_FromStringAndSize((const char *)out.at, out.len);
    native_state_free(&state);
    plain_out_free(&out);
    PyBuffer_Release(&payload);
    return result;
}

/* set_native(enabled) -> tuple: whether the walk decompresses natively (on at import; off for the
 * tests and benchmarks that compare with the Python calls), and the codecs it then does. */
static PyObject *set_native(PyObject *module, PyObject *arg) {
    (void)module;
    int enabled = PyObject_IsTrue(arg);
    if (enabled < 0) {
        return NULL;
    }
    native.enabled = enabled;
    PyObject *codecs = PyList_New(0);
    for (int codec = 1; codecs != NULL && codec <= 4; codec++) {
        if (native_has(codec)) {
            PyObject *number = PyLong_FromLong(codec);
            if (number == NULL || PyList_Append(codecs, number) < 0) {
                Py_XDECREF(number);
                Py_CLEAR(codecs);
                break;
            }
            Py_DECREF(number);
        }
    }
    PyObject *result = codecs == NULL ? NULL : PyList_AsTuple(codecs);
    Py_XDECREF(codecs);
    return result;
}

#endif
