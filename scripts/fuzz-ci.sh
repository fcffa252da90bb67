#!/usr/bin/env bash
# Keeps the fuzz targets (fuzz/, a workspace of its own) from rotting: every target must build,
# and each runs briefly on its committed seeds, so a target that no longer compiles or crashes
# at once fails CI. Called by scripts/test; see fuzz/README.md.
#
# With a nightly toolchain (rustup's `nightly`): installs cargo-fuzz from crates.io into
# ${CARGO_TARGET_DIR:-target}/cargo-fuzz (once), builds every target (`cargo fuzz build
# --dev`: unoptimized, so the build stays short; debug assertions and overflow checks on), then
# runs each for DSH_FUZZ_SECONDS (default 20) from a copy of its seeds. Without one it says so
# loudly and type-checks the fuzz workspace on stable (`cargo check`); the seeds still run as
# the owning crates' regression tests under `cargo test`.
#
#   scripts/fuzz-ci.sh                  every target
#   scripts/fuzz-ci.sh sse config       only these
# Exits non-zero when a target does not build, has no entry below, or fails on any input.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
case "$target" in /*) ;; *) target="$root/$target" ;; esac
seconds="${DSH_FUZZ_SECONDS:-20}"
cargo_fuzz_version="0.13.2"

# Each target's seeds (the regression inputs its owning crate's tests run) and libFuzzer options.
declare -A seeds=(
  [log_line]=server/session/tests/data/fuzz/log_line
  [log_load]=server/store/tests/data/fuzz/log_load
  [log_events]=server/store/tests/data/fuzz/log_events
  [sse]=server/provider/tests/data/fuzz/sse
  [admission]=server/daemon/tests/data/fuzz/admission
  [mock_request]=server/mock/tests/data/fuzz/mock_request
  [config]=server/config/tests/data/fuzz/config
  [acp_frame]=server/acp/tests/data/fuzz/acp_frame
  [web_convert]=server/agent/tests/data/fuzz/web_convert
  [prompt_file]=server/session/tests/data/fuzz/prompt_file
)
declare -A options=(
  [log_line]="-dict=dict/log.dict"
  [log_load]="-dict=dict/log.dict -max_len=16384"
  [log_events]=""
  [sse]="-dict=dict/sse.dict"
  [admission]="-dict=dict/admission.dict"
  [mock_request]="-dict=dict/mock_request.dict"
  [config]="-dict=dict/config.dict -max_len=8192"
  [acp_frame]="-dict=dict/acp_frame.dict -max_len=8192"
  [web_convert]="-dict=dict/html.dict -max_len=65536"
  [prompt_file]="-max_len=4096"
)

# The targets fuzz/Cargo.toml declares: each must have an entry above.
mapfile -t declared < <(sed -n 's/^name = "\([a-z_]*\)"$/\1/p' "$root/fuzz/Cargo.toml" | grep -v '^dsh-fuzz$' || true)
for name in "${declared[@]}"; do
  if [[ -z "${seeds[$name]+set}" || -z "${options[$name]+set}" ]]; then
    echo "fuzz target \`$name\` has no seeds or options in scripts/fuzz-ci.sh: add it there" >&2
    exit 1
  fi
done
if (($# > 0)); then targets=("$@"); else targets=("${declared[@]}"); fi

if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "################################################################################"
  echo "## NO NIGHTLY TOOLCHAIN: the fuzz targets are only type-checked on stable and NOT"
  echo "## run (cargo fuzz needs nightly). Their seeds still run as regression tests."
  echo "################################################################################"
  echo "== fuzz: cargo check of the fuzz workspace (stable)"
  CARGO_TARGET_DIR="$target/fuzz-check" cargo check --locked --manifest-path "$root/fuzz/Cargo.toml" --bins
  exit 0
fi

tools="$target/cargo-fuzz"
if [[ "$("$tools/bin/cargo-fuzz" --version 2>/dev/null)" != "cargo-fuzz $cargo_fuzz_version" ]]; then
  echo "== fuzz: installing cargo-fuzz $cargo_fuzz_version (crates.io) into $tools"
  cargo install --locked --quiet --root "$tools" --target-dir "$tools/build" \
    cargo-fuzz --version "$cargo_fuzz_version"
  rm -rf "$tools/build"
fi
export PATH="$tools/bin:$PATH"

cd "$root/fuzz"
fuzz_dir="$target/fuzz"
# The stable check's --locked: a build that would change fuzz/Cargo.lock fails here.
cargo +nightly metadata --locked --format-version 1 >/dev/null
echo "== fuzz: building ${#targets[@]} targets (nightly, cargo fuzz build --dev)"
start=$SECONDS
if (($# > 0)); then
  for name in "${targets[@]}"; do cargo +nightly fuzz build --dev --target-dir "$fuzz_dir" "$name"; done
else
  cargo +nightly fuzz build --dev --target-dir "$fuzz_dir"
fi
echo "built in $((SECONDS - start)) s"

failed=()
for name in "${targets[@]}"; do
  corpus="$fuzz_dir/corpus/$name"
  artifacts="$fuzz_dir/artifacts/$name/"
  rm -rf "$corpus" "$artifacts"
  mkdir -p "$corpus" "$artifacts"
  cp "$root/${seeds[$name]}"/* "$corpus/"
  echo "== fuzz: $name for ${seconds} s (seeds: ${seeds[$name]})"
  # shellcheck disable=SC2086 # the options are words
  if cargo +nightly fuzz run --dev --target-dir "$fuzz_dir" "$name" "$corpus" -- \
      -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$artifacts" ${options[$name]} >"$fuzz_dir/$name.log" 2>&1; then
    grep -E '^(stat::number_of_executed_units|stat::new_units_added)' "$fuzz_dir/$name.log" \
      | tr '\n' ' ' && echo
  else
    echo "FAILED: fuzz target $name (log: $fuzz_dir/$name.log)"
    grep -m 1 -A 2 -E 'panicked at|^error|ERROR: libFuzzer' "$fuzz_dir/$name.log" || true
    echo "its last lines:"
    tail -n 25 "$fuzz_dir/$name.log"
    for input in "$artifacts"*; do
      [[ -f "$input" ]] || continue
      echo "failing input $input (base64):"
      base64 -w 0 "$input" && echo
    done
    failed+=("$name")
  fi
done
if ((${#failed[@]} > 0)); then
  echo "fuzz targets that failed: ${failed[*]}"
  exit 1
fi
