#!/usr/bin/env bash
# The README's one-machine commands, in order, deployed as in production: the SuperLink
# serves TLS (a CA made here), only the three enrolled SuperNodes may join, every site has
# its own HMAC key, and each site runs its worker next to its SuperNode. Then one
# `flwr run` and a check of the saved model. Every process started here listens on
# 127.0.0.1 only and is ended on exit, by PID; logs go to logs/.
set -euo pipefail
cd "$(dirname "$0")"
SUPERLINK_PORT=${SUPERLINK_PORT:-8000}
export FLWR_TELEMETRY_ENABLED=0
pids=()
descendants() {  # a SuperNode's SuperExec and app processes run in sessions of their own
    local child
    for child in $(pgrep -P "$1" || true); do echo "$child"; descendants "$child"; done
}
SOCKETS=$(mktemp -d)  # the site workers' sockets: a directory only this user can enter
cleanup() {
    local all=()
    for pid in "${pids[@]}"; do all+=("$pid" $(descendants "$pid")); done
    kill "${all[@]}" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$SOCKETS"
}
trap cleanup EXIT
rm -rf logs .flwr model.skops certificates
mkdir -p logs certificates

python prepare_sites.py sites

# 1. certificates: a CA, and the SuperLink's certificate for the names it is dialled at
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-384 -nodes -days 30 \
    -subj "/CN=sklearn-fed demo CA" -keyout certificates/ca.key -out certificates/ca.crt 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-384 -nodes -subj "/CN=127.0.0.1" \
    -keyout certificates/server.key -out certificates/server.csr 2>/dev/null
openssl x509 -req -in certificates/server.csr -CA certificates/ca.crt -CAkey certificates/ca.key \
    -CAcreateserial -days 30 -out certificates/server.pem \
    -extfile <(printf "subjectAltName=IP:127.0.0.1,DNS:localhost") 2>/dev/null

# 2. one key pair per SuperNode (each site makes its own and sends only the .pub)
for site in north south east; do
    ssh-keygen -q -t ecdsa -b 384 -N "" -C "$site" -f "certificates/$site"
done

# 3. the SuperLink: TLS, and only enrolled SuperNodes (one HTTPS port for SuperNodes,
#    the ServerApp and the flwr CLI)
FLWR_HOME=.flwr/superlink flower-superlink \
    --ssl-ca-certfile certificates/ca.crt --ssl-certfile certificates/server.pem \
    --ssl-keyfile certificates/server.key --enable-supernode-auth \
    --disable-runtime-dependency-installation --port "$SUPERLINK_PORT" > logs/superlink.log 2>&1 &
pids+=($!)

# 4. the flwr CLI's connection to this SuperLink, trusting the CA
export FLWR_HOME=$PWD/.flwr/cli
mkdir -p "$FLWR_HOME"
cat > "$FLWR_HOME/config.toml" <<TOML
[superlink]
default = "local-deployment"

[superlink.local-deployment]
address = "127.0.0.1:$SUPERLINK_PORT"
root-certificates = "$PWD/certificates/ca.crt"
TOML
for _ in $(seq 60); do  # wait (at most 60 s) until the SuperLink answers
    flwr supernode ls local-deployment > /dev/null 2>&1 && break
    sleep 1
done

# 5. enroll the three sites' public keys
for site in north south east; do
    flwr supernode register "certificates/$site.pub" local-deployment --name "$site"
done

# 6. per site: its worker (scikit-learn loaded once, the run's state kept in memory between
#    rounds), then its SuperNode, whose node config says where its rows, key and worker are
port=${SUPERNODE_PORT:-9094}
for site in north south east; do
    python -m sklearn_fed.flower.worker --socket "$SOCKETS/$site.sock" > "logs/$site-worker.log" 2>&1 &
    pids+=($!)
    FLWR_HOME=$PWD/.flwr/$site flower-supernode --superlink "127.0.0.1:$SUPERLINK_PORT" \
        --root-certificates certificates/ca.crt --auth-supernode-private-key "certificates/$site" \
        --port "$port" \
        --node-config "site=\"$site\" data-path=\"sites/$site.csv\" target=\"target\" key-file=\"sites/$site.key\" worker-socket=\"$SOCKETS/$site.sock\"" \
        > "logs/$site.log" 2>&1 &
    pids+=($!)
    port=$((port + 1))
done

# 7. wait (at most 60 s) until the three SuperNodes are online
for _ in $(seq 60); do
    online=$(flwr supernode ls local-deployment --format json 2>/dev/null \
        | python -c 'import json,sys; print(sum(n["status"] == "online" for n in json.load(sys.stdin).get("nodes", [])))' \
        2>/dev/null || echo 0)
    [ "$online" -ge 3 ] && break
    sleep 1
done
[ "$online" -ge 3 ] || { echo "only $online SuperNodes online; see logs/"; exit 1; }

# 8. run the app: the ServerApp fits FederatedRidgeCV over the three sites
flwr run . local-deployment --stream

# 9. the saved model equals the in-process fit on the same rows
python check_model.py sites model.skops
