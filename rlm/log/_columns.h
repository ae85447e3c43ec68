/* The column buffers of rlm.log.columns.COLUMNS, in its order: shared by the C record decoder
 * (rlm/log/_decode.c), which fills them, and the C NDJSON writer (rlm/stream/_ndjson.c), which
 * reads them. The cross-checks of both against their Python references (tests/unit/
 * test_decode_loops.py, tests/unit/test_ndjson_lines.py) fail when this order is not COLUMNS'. */
#ifndef RLM_COLUMNS_H
#define RLM_COLUMNS_H

enum {
    C_OFFSET,
    C_TIMESTAMP,
    C_BATCH,
    C_KEY_OFFSETS,
    C_KEY_DATA,
    C_KEY_VALIDITY,
    C_VALUE_OFFSETS,
    C_VALUE_DATA,
    C_VALUE_VALIDITY,
    C_HEADER_OFFSETS,
    C_HKEY_OFFSETS,
    C_HKEY_DATA,
    C_HVALUE_OFFSETS,
    C_HVALUE_DATA,
    C_HVALUE_VALIDITY,
    NCOL
};

#endif
