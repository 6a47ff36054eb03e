#!/usr/bin/env bash
# The README's one-machine commands, in order: a SuperLink and three SuperNodes on
# 127.0.0.1, one `flwr run`, then a check of the saved model. Every process started
# here is ended on exit (by PID); logs go to logs/.
set -euo pipefail
cd "$(dirname "$0")"
SUPERLINK_PORT=${SUPERLINK_PORT:-8000}
export FLWR_TELEMETRY_ENABLED=0
pids=()
descendants() {  # a SuperNode's SuperExec and app processes run in sessions of their own
    local child
    for child in $(pgrep -P "$1" || true); do echo "$child"; descendants "$child"; done
}
cleanup() {
    local all=()
    for pid in "${pids[@]}"; do all+=("$pid" $(descendants "$pid")); done
    kill "${all[@]}" 2>/dev/null || true
    wait 2>/dev/null || true
}
trap cleanup EXIT
rm -rf logs .flwr model.skops
mkdir -p logs

python prepare_sites.py sites

# 1. the SuperLink (one HTTP port for SuperNodes, the ServerApp and the flwr CLI)
FLWR_HOME=.flwr/superlink flower-superlink --insecure --disable-runtime-dependency-installation \
    --port "$SUPERLINK_PORT" > logs/superlink.log 2>&1 &
pids+=($!)

# 2. one SuperNode per site; its node config says where its rows are and which key it holds
port=${SUPERNODE_PORT:-9094}
for site in north south east; do
    FLWR_HOME=.flwr/$site flower-supernode --insecure --superlink "127.0.0.1:$SUPERLINK_PORT" \
        --port "$port" \
        --node-config "site=\"$site\" data-path=\"sites/$site.csv\" target=\"target\" key-file=\"sites/$site.key\"" \
        > "logs/$site.log" 2>&1 &
    pids+=($!)
    port=$((port + 1))
done

# 3. the flwr CLI's connection to this SuperLink
export FLWR_HOME=$PWD/.flwr/cli
mkdir -p "$FLWR_HOME"
cat > "$FLWR_HOME/config.toml" <<TOML
[superlink]
default = "local-deployment"

[superlink.local-deployment]
address = "127.0.0.1:$SUPERLINK_PORT"
insecure = true
TOML

# 4. wait (at most 60 s) until the three SuperNodes are online
for _ in $(seq 60); do
    online=$(flwr supernode ls local-deployment --format json 2>/dev/null \
        | python -c 'import json,sys; print(sum(n["status"] == "online" for n in json.load(sys.stdin).get("nodes", [])))' \
        2>/dev/null || echo 0)
    [ "$online" -ge 3 ] && break
    sleep 1
done
[ "$online" -ge 3 ] || { echo "only $online SuperNodes online; see logs/"; exit 1; }

# 5. run the app: the ServerApp fits FederatedRidgeCV over the three sites
flwr run . local-deployment --stream

# 6. the saved model equals the in-process fit on the same rows
python check_model.py sites model.skops
