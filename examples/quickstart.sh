#!/usr/bin/env bash
# The quick start behind `make run`: a generated Kafka log dir, `rlm serve` on the embedded defaults
# (SQLite metadata, a local-directory remote store), tiering, then offset lookups over REST and
# gRPC that hit the remote tier and the local tier, and a stream of the records between them.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
OUT=build/quickstart
HTTP=127.0.0.1:18080
GRPC=127.0.0.1:19090
READ_TOKEN=quickstart-read-token

rm -rf "$OUT" && mkdir -p "$OUT"
echo "== 1. a sample Kafka log dir: 2 topics x 2 partitions, 20000 records each"
$BIN/rlm log produce "$OUT/logs" --topics 2 --partitions 2 --records 20000 --segment-bytes 262144 \
  --seed 7 --quiet

printf 'read %s\nadmin quickstart-admin-token\n' "$READ_TOKEN" > "$OUT/tokens"
cat > "$OUT/rlm.yaml" <<YAML
log.dirs: [$OUT/logs]
broker.id: 0
metadata.url: sqlite:///$OUT/metadata.db
remote.url: file://$PWD/$OUT/remote
remote.log.index.cache.dir: $OUT/index-cache
http.host: 127.0.0.1
http.port: ${HTTP##*:}
grpc.host: 127.0.0.1
grpc.port: ${GRPC##*:}
remote.log.manager.task.interval.ms: 1000
auth.tokens.file: $OUT/tokens
topics:
  defaults: {retention.ms: -1}
YAML

echo "== 2. the metadata schema, then rlm serve (copier + retention + REST + gRPC)"
$BIN/rlm db upgrade --url "sqlite:///$OUT/metadata.db"
$BIN/rlm serve --config "$OUT/rlm.yaml" > "$OUT/serve.log" 2>&1 &
SERVE=$!
trap 'kill $SERVE 2>/dev/null || true' EXIT
get() { curl -sf -H "Authorization: Bearer $READ_TOKEN" "http://$HTTP$1"; }
for _ in $(seq 1 60); do curl -sf "http://$HTTP/readyz" >/dev/null 2>&1 && break; sleep 0.5; done
curl -sf "http://$HTTP/readyz" || { cat "$OUT/serve.log"; exit 1; }
echo

echo "== 3. waiting until the rolled segments are tiered"
for _ in $(seq 1 60); do
  lag=$(get "/v1/topics?topic=orders" | $BIN/python -c \
    'import json,sys; p=json.load(sys.stdin)["topics"][0]["partitions"]; print(sum(x["copy_lag_segments"] for x in p) + sum(x["tiered_segments"] == 0 for x in p))')
  [ "$lag" = "0" ] && break
  sleep 1
done
get "/v1/topics?topic=orders" | $BIN/python -m json.tool --compact
echo

echo "== 4. the broker's local retention removes the older half of orders-0's (already tiered) segments"
$BIN/python - "$OUT/logs/orders-0" <<'PY'
import sys
from pathlib import Path
logs = sorted(Path(sys.argv[1]).glob("*.log"))
for log in logs[: len(logs) // 2]:
    for suffix in (".log", ".index", ".timeindex", ".txnindex"):
        log.with_suffix(suffix).unlink(missing_ok=True)
print(f"removed {len(logs) // 2} of {len(logs)} local segments")
PY

EARLY=2023-11-14T22:13:40Z
LATE=2023-11-14T22:29:00Z
echo "== 5. REST: which offset was at $EARLY (now only remote) and at $LATE (still local)?"
echo "curl -H 'Authorization: Bearer ...' 'http://$HTTP/v1/topics/orders/partitions/0/offsets?timestamp=$EARLY'"
get "/v1/topics/orders/partitions/0/offsets?timestamp=$EARLY"; echo
get "/v1/topics/orders/partitions/0/offsets?timestamp=$LATE"; echo
get "/v1/topics/orders/partitions/0/offsets?timestamp=max-timestamp"; echo
curl -sf -H "Authorization: Bearer $READ_TOKEN" -H 'Content-Type: application/json' "http://$HTTP/v1/list-offsets" \
  -d '{"topics":[{"name":"orders","partitions":[{"partition_index":0,"timestamp":-2},{"partition_index":1,"timestamp":-5},{"partition_index":9,"timestamp":0}]}]}'
echo

echo "== 6. REST: the records from $EARLY to $LATE, one stream across both tiers (NDJSON, a record a line)"
RANGE="/v1/topics/orders/partitions/0/records?from_timestamp=$EARLY&to_timestamp=$LATE"
echo "curl -H 'Accept: application/x-ndjson' -H 'Authorization: Bearer ...' 'http://$HTTP$RANGE'"
for isolation in read_uncommitted read_committed; do
  curl -sf -H "Authorization: Bearer $READ_TOKEN" -H 'Accept: application/x-ndjson' \
    "http://$HTTP$RANGE&isolation_level=$isolation" | $BIN/python -c '
import json, sys
offsets = [json.loads(line)["offset"] for line in sys.stdin]
print(f"{sys.argv[1]}: {len(offsets)} records, offsets {offsets[0]}..{offsets[-1]}, in order: {offsets == sorted(set(offsets))}")
' "$isolation"
done

echo "== 7. gRPC: the same questions"
$BIN/rlm lookup orders 0 --timestamp "$EARLY" --grpc "$GRPC" --token "$READ_TOKEN"
$BIN/rlm lookup orders 0 --timestamp "$LATE" --grpc "$GRPC" --token "$READ_TOKEN"

echo "== 8. a request without a token is refused"
curl -s -o /dev/null -w '%{http_code}\n' "http://$HTTP/v1/topics/orders/partitions/0/offsets?timestamp=$EARLY"

kill -TERM $SERVE && wait $SERVE || true
trap - EXIT
echo "== done: rlm serve stopped cleanly; its log is in $OUT/serve.log"
