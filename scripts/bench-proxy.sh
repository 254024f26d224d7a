#!/bin/sh
# make bench, proxy part: what privai-admin's proxy costs a streamed
# completion.  privai-admin (--dev, its own state under $BUILD/bench)
# deploys MODEL on CPU (default a small synthetic model, 256 wide, 4
# layers, 32000-token vocabulary, Q8_0: fast tokens make the proxy's
# share of each one show); privai-bench then runs the
# same workload straight at the engine (its admin key) and through
# /api/v1/deployments/1 (an API token), at concurrency 1 and 8.  Prints
# both tables; JSON in $BUILD/bench/proxy.jsonl.
set -eu
BUILD=${BUILD:-build}
dir=$BUILD/bench
state=$dir/proxy-state
m=${MODEL:-$dir/small-q8_0.gguf}
IN=${IN:-16}
OUT=${OUT:-128}
CONCURRENCY=${CONCURRENCY:-1,8}
REQUESTS=${REQUESTS:-48}
mkdir -p "$dir"
[ -f "$m" ] || "$BUILD/privai-engine" synth -o "$m" --dim 256 --layers 4 --heads 8 --kv-heads 4 --ff 768 \
	--vocab 32000 --type Q8_0 >/dev/null
rm -rf "$state" "$state.pw" "$dir/proxy.log"
pw="bench-proxy-password-1"
echo "$pw" >"$state.pw"
PRIVAI_ADMIN_PASSWORD_FILE=$state.pw PRIVAI_ENGINE_RUNNER=child "$BUILD/privai-admin" --dev --port 0 \
	--state-dir "$state" --demo-model "$m" --engine-ports 18950-18959 2>"$dir/proxy.log" &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
# sign in, make an operator token, wait for the deployment: the console's own API
eval "$(python3 - "$dir/proxy.log" "$pw" <<'EOF'
import http.client, json, re, sys, time
log, pw = sys.argv[1], sys.argv[2]
for _ in range(300):
    m = re.search(r"console on http://127\.0\.0\.1:(\d+)/", open(log).read())
    if m:
        break
    time.sleep(0.1)
port = int(m.group(1))
def call(method, path, body=None, h=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request(method, path, json.dumps(body) if body is not None else None,
              dict({"Content-Type": "application/json"}, **(h or {})))
    r = c.getresponse()
    return r, json.loads(r.read() or b"null")
r, j = call("POST", "/api/v1/auth/login", {"name": "admin", "password": pw})
cookie = re.search(r"privai_session=([^;]*)", r.getheader("Set-Cookie")).group(1)
h = {"Cookie": "privai_session=" + cookie, "X-CSRF-Token": j["csrf_token"]}
_, t = call("POST", "/api/v1/tokens", {"name": "bench", "scopes": ["write"]}, h)
for _ in range(600):
    _, d = call("GET", "/api/v1/deployments/1", None, h)
    if d["state"] == "ready":
        break
    time.sleep(0.1)
print(f"port={port} token={t['token']} engine_port={d['port']}")
EOF
)"
# the engine's key file holds only hashes: go straight in with a deployment key
key=$(python3 - "$port" "$token" <<'EOF'
import http.client, json, sys
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=60)
c.request("POST", "/api/v1/deployments/1/keys", json.dumps({"name": "bench"}),
          {"Authorization": "Bearer " + sys.argv[2], "Content-Type": "application/json"})
print(json.loads(c.getresponse().read())["api_key"])
EOF
)
sleep 1 # the engine rereads its key file on SIGHUP
echo "== direct: the engine on :$engine_port, $IN in / $OUT out, concurrency $CONCURRENCY"
"$BUILD/privai-bench" --url "http://127.0.0.1:$engine_port" --api-key "$key" --model demo \
	--concurrency "$CONCURRENCY" --requests "$REQUESTS" --input-tokens "$IN" --output-tokens "$OUT" \
	--json "$dir/proxy.jsonl"
echo "== through privai-admin's proxy on :$port"
"$BUILD/privai-bench" --url "http://127.0.0.1:$port/api/v1/deployments/1" --api-key "$token" --model demo \
	--concurrency "$CONCURRENCY" --requests "$REQUESTS" --input-tokens "$IN" --output-tokens "$OUT" \
	--json "$dir/proxy.jsonl"
kill -TERM $pid
wait $pid || true
trap - EXIT
