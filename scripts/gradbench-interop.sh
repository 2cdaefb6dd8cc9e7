#!/usr/bin/env bash
# Runs GradBench's own evals, at a pinned commit and with GradBench's own validation, against
# `adgauge tool`, and prints one line per eval: how many of its evaluations GradBench judged valid.
#
#   scripts/gradbench-interop.sh [EVAL...]        # default: all 12 evals
#
# What it builds, once, under $ADGAUGE_GRADBENCH_DIR (default ~/.cache/adgauge-gradbench):
#   src/      GradBench at the pinned commit (scripts/gradbench-source.sh; $GRADBENCH_SRC: a URL,
#             a git repository or a directory holding an export of it)
#   target/   GradBench's CLI (`cargo build --release -p gradbench`: crates from the registry)
#   venv/     the evals' Python packages (numpy, pydantic, dataclasses-json, scipy: PyPI)
#   GradBench's reference tool `manual` (C++), which most evals compare against.
# GradBench's Makefile downloads one file from GitHub, nlohmann's json.hpp (v3.11.3); this script
# takes it from the system instead (Debian's nlohmann-json3-dev, /usr/include/nlohmann/json.hpp,
# or $JSON_HPP), so nothing beyond the package registries is fetched.
#
# adgauge: $ADGAUGE_BIN, else a release build of this checkout (CARGO_TARGET_DIR honoured). The
# tool command is `adgauge tool` plus $ADGAUGE_TOOL_ARGS (e.g. "--backend cpu-jit").
# Each eval runs with GradBench's default arguments plus $GRADBENCH_EVAL_ARGS (e.g.
# "--min-seconds 0"), under the CLI's per-response timeout $GRADBENCH_TIMEOUT (default 600 s).
# Logs: $ADGAUGE_GRADBENCH_DIR/logs/<eval>.jsonl. Exit 0 when every evaluation of every eval was
# valid; 1 otherwise; 2 when something could not be built.
set -uo pipefail
cd "$(dirname "$0")/.."
root="$PWD"

work="${ADGAUGE_GRADBENCH_DIR:-$HOME/.cache/adgauge-gradbench}"
logs="$work/logs"
timeout_s="${GRADBENCH_TIMEOUT:-600}"
all_evals=(hello lse det ht ode particle saddle kmeans llsq lstm gmm ba)
evals=("$@")
[ ${#evals[@]} -eq 0 ] && evals=("${all_evals[@]}")

say() { echo "gradbench-interop: $*" >&2; }
fail_build() { say "$*"; exit 2; }

# 1. GradBench's source at the pinned commit.
mkdir -p "$work" "$logs"
src="$(scripts/gradbench-source.sh)" || fail_build "no GradBench source"

# 2. The CLI.
gradbench="$work/target/release/gradbench"
if [ ! -x "$gradbench" ]; then
  say "building GradBench's CLI (a few minutes)"
  CARGO_TARGET_DIR="$work/target" cargo build -q --release --locked -p gradbench \
    --manifest-path "$src/Cargo.toml" 2>"$work/cli-build.log" \
    || fail_build "GradBench's CLI did not build ($work/cli-build.log)"
fi

# 3. The evals' Python.
py="$work/venv/bin/python"
if ! "$py" -c 'import numpy, pydantic, dataclasses_json, scipy' 2>/dev/null; then
  say "making the evals' virtualenv"
  python3 -m venv "$work/venv" || fail_build "python3 -m venv failed (install python3-venv)"
  "$py" -m pip install -q "numpy==2.4.6" "pydantic==2.12.5" "dataclasses-json==0.6.7" "scipy==1.17.1" \
    || fail_build "pip could not install the evals' packages"
fi

# 4. The reference tool `manual`, with json.hpp from the system.
if [ ! -f "$src/cpp/json.hpp" ]; then
  json="${JSON_HPP:-/usr/include/nlohmann/json.hpp}"
  [ -f "$json" ] || fail_build "no json.hpp: install nlohmann-json3-dev or set JSON_HPP"
  # Debian's header includes its siblings by <nlohmann/...>; a one-line forwarder keeps them.
  printf '#include <%s>\n' "$json" > "$src/cpp/json.hpp"
fi
make -s -C "$src/tools/manual" NATIVE=no >/dev/null || fail_build "GradBench's manual tool did not build"

# 5. adgauge.
if [ -z "${ADGAUGE_BIN:-}" ]; then
  cargo build -q --release -p adgauge || fail_build "adgauge did not build"
  ADGAUGE_BIN="$root/${CARGO_TARGET_DIR:-target}/release/adgauge"
  case "${CARGO_TARGET_DIR:-}" in /*) ADGAUGE_BIN="$CARGO_TARGET_DIR/release/adgauge" ;; esac
fi
say "adgauge: $("$ADGAUGE_BIN" --version)"

# Inputs a clone from GitHub has but a partial mirror may lack: said, never hidden.
eval_args_for() {
  case "$1" in
    ht)
      if ! compgen -G "$src/evals/ht/data/complicated_big/hand12_*.txt" >/dev/null \
        || [ ! -s "$(compgen -G "$src/evals/ht/data/complicated_big/hand12_*.txt" | head -1)" ]; then
        say "ht: hand12 is absent from this source; running hand1-hand11"
        echo "--max 11"
      fi ;;
  esac
}
if [ ! -s "$src/evals/lstm/data/lstm_full.txt" ]; then
  say "lstm: lstm_full.txt is absent from this source; using GradBench's README texts as the text"
  cat "$src"/evals/*/README.md "$src"/tools/*/README.md > "$src/evals/lstm/data/lstm_full.txt"
fi

# 6. Each eval against `adgauge tool`.
status=0
printf '%-9s %-24s %s\n' eval "valid / evaluations" "wall"
for e in "${evals[@]}"; do
  [ -f "$src/python/gradbench/gradbench/evals/$e/run.py" ] || { say "unknown eval $e"; status=2; continue; }
  log="$logs/$e.jsonl"
  rm -f "$log"
  start=$(date +%s.%N)
  # shellcheck disable=SC2046
  (cd "$src" && PYTHONPATH="$src/python/gradbench" "$gradbench" run -o "$log" --timeout "$timeout_s" \
    --eval "$py python/gradbench/gradbench/evals/$e/run.py $(eval_args_for "$e") ${GRADBENCH_EVAL_ARGS:-}" \
    --tool "$ADGAUGE_BIN tool ${ADGAUGE_TOOL_ARGS:-}" >"$logs/$e.out" 2>&1)
  cli=$?
  end=$(date +%s.%N)
  line=$(python3 - "$log" "$cli" <<'EOF'
import json, sys
path, cli = sys.argv[1], int(sys.argv[2])
evaluations, valid, failed, errors = {}, 0, [], []
try:
    lines = open(path).read().splitlines()
except OSError:
    lines = []
for raw in lines:
    entry = json.loads(raw)
    msg = entry.get("message")
    if msg and msg.get("kind") == "evaluate":
        evaluations[msg["id"]] = f'{msg.get("function")} {msg.get("description", "")}'.strip()
    resp = entry.get("response")
    if resp and resp.get("success") is False and resp.get("error"):
        errors.append(str(resp["error"]).splitlines()[0][:120])
    if msg and msg.get("kind") == "analysis":
        if msg.get("valid"):
            valid += 1
        else:
            failed.append(evaluations.get(msg.get("of"), "?"))
n = len(evaluations)
ok = n > 0 and valid == n and cli == 0
text = f"{valid}/{n}"
if not ok:
    text += f" FAILED (cli exit {cli}" + (f"; invalid: {', '.join(failed[:4])}" if failed else "")
    text += (f"; first error: {errors[0]}" if errors else "") + ")"
print(("ok " if ok else "bad ") + text)
EOF
)
  verdict=${line%% *}
  printf '%-9s %-24s %.1f s\n' "$e" "${line#* }" "$(echo "$end - $start" | bc)"
  [ "$verdict" = ok ] || status=1
done
[ $status -eq 1 ] && say "logs and CLI output: $logs"
exit $status
