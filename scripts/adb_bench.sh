#!/usr/bin/env bash
# On-device benchmark: slice MODEL for each BUDGET on the host, push the device binary, the models and
# the input to the device, run every configuration (NCNN-Default first, warm-ups, computing threads
# pinned to the big cores, the loader on a little core), pull the JSON lines and outputs, and report
# them with `python -m flexnn_ncnn.bench --ingest` (outputs checked against stock NCNN on the host).
#
#   scripts/adb_bench.sh [options] MODEL.json BUDGET...     (MODEL.json from python -m flexnn_ncnn.models)
#
# Options: --serial S (adb -s S) | --ssh HOST (a Linux board over ssh/scp instead of adb)
#          --threads N (2) --warmup W (4) --loops N (8) --rounds R (1)
#          --compute-cpus 4,5 (default: the THREADS fastest CPUs by cpuinfo_max_freq) --loader little|big|any (little)
#          --binary PATH --remote-dir DIR --out DIR (bench-results/device)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"

fail() { echo "error: $*" >&2; exit 2; }

serial="" ssh_host="" threads=2 warmup=4 loops=8 rounds=1 compute_cpus="" loader=little binary="" remote_dir="" out=bench-results/device
while [[ $# -gt 0 && "$1" == --* ]]; do
    [[ $# -ge 2 ]] || fail "$1 needs a value"
    case "$1" in
        --serial) serial="$2" ;; --ssh) ssh_host="$2" ;; --threads) threads="$2" ;; --warmup) warmup="$2" ;;
        --loops) loops="$2" ;; --rounds) rounds="$2" ;; --compute-cpus) compute_cpus="$2" ;; --loader) loader="$2" ;;
        --binary) binary="$2" ;; --remote-dir) remote_dir="$2" ;; --out) out="$2" ;;
        *) fail "unknown option $1 (see the header of $0)" ;;
    esac
    shift 2
done
[[ $# -ge 2 ]] || fail "usage: $0 [options] MODEL.json BUDGET... (see the header of $0)"
model_json="$1"; shift
[[ -f "$model_json" ]] || fail "$model_json does not exist: write it with python -m flexnn_ncnn.models NAME -o DIR"

# the transport: adb (Android) or ssh/scp (a Linux board); remote_sh runs one shell command line there
if [[ -n "$ssh_host" ]]; then
    command -v ssh >/dev/null && command -v scp >/dev/null || fail "ssh and scp are needed for --ssh"
    binary="${binary:-build/linux-aarch64/native/tools/flexnn-bench}" remote_dir="${remote_dir:-/tmp/flexnn}" target=linux-aarch64
    ssh -o BatchMode=yes "$ssh_host" true || fail "cannot reach $ssh_host over ssh (key-based login is needed)"
    remote_sh() { ssh -o BatchMode=yes "$ssh_host" "$1"; }
    push() { scp -q "$1" "$ssh_host:$2"; }
    pull() { scp -q "$ssh_host:$1" "$2"; }
else
    command -v adb >/dev/null || fail "adb not found: install Android platform-tools and put adb on PATH"
    adb_cmd=(adb); [[ -n "$serial" ]] && adb_cmd+=(-s "$serial")
    state="$("${adb_cmd[@]}" get-state 2>&1 || true)"
    [[ "$state" == device ]] || fail "no Android device ready (adb get-state: ${state//$'\n'/ })"
    binary="${binary:-build/android-arm64/native/tools/flexnn-bench}" remote_dir="${remote_dir:-/data/local/tmp/flexnn}" target=android-arm64
    remote_sh() { "${adb_cmd[@]}" shell "$1"; }
    push() { "${adb_cmd[@]}" push "$1" "$2" >/dev/null; }
    pull() { "${adb_cmd[@]}" pull "$1" "$2" >/dev/null; }
fi
[[ -x "$binary" ]] || fail "$binary is missing: build it with scripts/build_android.sh (or scripts/build_linux_aarch64.sh for --ssh)"

# the model's files and blobs, and the budgets in bytes, from the Python side (one error line if unreadable)
model_info="$("$PYTHON" -c '
import json, sys
from pathlib import Path
from flexnn_ncnn.cli import run_main
def main(argv):
    from flexnn_ncnn.models import read_description
    from flexnn_ncnn.units import parse_size
    d = read_description(argv[0])
    shape = ",".join(map(str, [1] + d["inputs"][0]["shape"]))
    print(d["param"], d["bin"], d["inputs"][0]["name"], d["outputs"][0], shape, *map(parse_size, argv[1:]))
sys.exit(run_main(main, sys.argv[1:]))
' "$model_json" "$@")" || exit 2
read -r param bin input_blob output_blob input_shape budgets_text <<< "$model_info"
read -r -a budgets <<< "$budgets_text"

[[ -n "$out" ]] || fail "--out needs a folder"
work="$out/work"
rm -rf "$work/outputs" "$work/results.jsonl" && mkdir -p "$work/outputs"  # this run's results only
"$PYTHON" -m flexnn_ncnn.bench.device input "$model_json" "$work/input.npy"
stem="$(basename "${param%.param}")"
for b in "${budgets[@]}"; do
    "$PYTHON" -m flexnn_ncnn.slice "$param" --bin "$bin" --budget "$b" --input-shape "$input_shape" --target "$target" -o "$work/sliced-$b" >/dev/null
done

# computing threads on the fastest cores (paper §5.1), unless given
if [[ -z "$compute_cpus" ]]; then
    compute_cpus="$(remote_sh 'for c in /sys/devices/system/cpu/cpu[0-9]*; do echo "${c##*cpu} $(cat $c/cpufreq/cpuinfo_max_freq 2>/dev/null || echo 0)"; done' \
        | sort -k2,2nr -k1,1n | head -n "$threads" | cut -d' ' -f1 | sort -n | paste -sd, -)"
fi
mask=0
IFS=, read -r -a cpu_list <<< "$compute_cpus"
for c in "${cpu_list[@]}"; do mask=$((mask | (1 << c))); done
mask="$(printf '%x' "$mask")"
echo "computing on CPUs $compute_cpus (mask $mask), loader on $loader cores"

remote_sh "mkdir -p $remote_dir/out"
push "$binary" "$remote_dir/flexnn-bench"
remote_sh "chmod 755 $remote_dir/flexnn-bench"
push "$work/input.npy" "$remote_dir/input.npy"
push "$param" "$remote_dir/$stem.param"
push "$bin" "$remote_dir/$stem.bin"
for b in "${budgets[@]}"; do
    for f in "$work/sliced-$b"/*; do push "$f" "$remote_dir/$b.$(basename "$f")"; done
done

# run FAMILY MODE BUDGET_ARG BUDGET_JSON MODEL_PREFIX ROUND: one configuration, one JSON line into results.jsonl
run() {
    local family="$1" mode="$2" budget_arg="$3" budget_json="$4" prefix="$5" round="$6"
    local tag="${family}_${budget_json}_r$round"
    local line
    line="$(remote_sh "cd $remote_dir && taskset $mask ./flexnn-bench $prefix.param $prefix.bin input.npy budget=$budget_arg mode=$mode \
loops=$loops warmup=$warmup threads=$threads loader=$loader input=$input_blob output=$output_blob out=out/$tag.npy" | tail -n 1)"
    [[ "$line" == \{* ]] || fail "$family ($mode, budget $budget_arg) printed no JSON line on the device: $line"
    mkdir -p "$work/outputs/$tag"
    pull "$remote_dir/out/$tag.npy" "$work/outputs/$tag/$output_blob.npy"
    echo "{\"family\": \"$family\", \"budget\": $budget_json, \"round\": $round, \"outputs\": \"outputs/$tag\", \"device\": $line}" >> "$work/results.jsonl"
    echo "$family budget=$budget_arg: $line"
}
for ((r = 0; r < rounds; r++)); do
    run ncnn-default stock 0 null "$stem" "$r"
    run ncnn-direct direct 0 null "$stem" "$r"
    run on-demand ondemand min null "$stem" "$r"  # unsliced: load before each layer, release after
    for b in "${budgets[@]}"; do run flexnn flexnn "$b" "$b" "$b.$stem.flexnn" "$r"; done
done

exec "$PYTHON" -m flexnn_ncnn.bench --model "$model_json" --ingest "$work" --threads "$threads" --warmup "$warmup" \
    --loops "$loops" -o "$out" --results-md "$out/RESULTS.md"
