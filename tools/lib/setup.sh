# Shared by tools/quickstart-run.sh and tools/quickstart-test.sh (sourced, not run):
# install what is missing on a Debian machine, check the Rust toolchain, configure and build.

NPUOPT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
NPUOPT_BUILD_DIR="${NPUOPT_BUILD_DIR_OVERRIDE:-$NPUOPT_ROOT/build}"
NPUOPT_CMAKE_RUST_ARGS=()

# Debian packages npuopt builds and runs with.
NPUOPT_APT_PACKAGES=(
  build-essential cmake pkg-config
  libsqlite3-dev nlohmann-json3-dev libcurl4-openssl-dev libyaml-cpp-dev libeigen3-dev
  libspdlog-dev libfmt-dev doctest-dev libcli11-dev
  libmuparser-dev libcmark-gfm-dev libcmark-gfm-extensions-dev
  libcpp-httplib-dev libkainjow-mustache-dev zlib1g-dev
  bubblewrap graphviz python3
)

# Debian packages only the tests need (tools/quickstart-test.sh): headless Chromium for the
# dashboard's browser test; Slurm and munge for the Slurm executor's test, which starts a
# single-node cluster on loopback (tools/slurm/local-cluster.sh) and stops it.
NPUOPT_TEST_APT_PACKAGES=(chromium slurm-wlm munge)

npuopt_say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
npuopt_die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# Install the given Debian packages where missing (idempotent: nothing happens when all are present).
npuopt_apt_install() {
  local missing=() package
  for package in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$package")
    fi
  done
  if [ "${#missing[@]}" -eq 0 ]; then
    npuopt_say "system packages: all present ($*)"
    return 0
  fi
  command -v apt-get >/dev/null || npuopt_die "missing packages (${missing[*]}) and no apt-get: install them by hand"
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || npuopt_die "missing packages (${missing[*]}): run as root or install sudo"
    sudo=(sudo)
  fi
  npuopt_say "installing: ${missing[*]}"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}

npuopt_install_deps() { npuopt_apt_install "${NPUOPT_APT_PACKAGES[@]}"; }

# The oldest rustc that builds the simulator: tools/npu-sim's `rust-version` (Debian 12's rustc).
NPUOPT_RUST_MIN=1.63

# True when dotted version $1 >= $2.
npuopt_version_ge() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]; }

# The simulator (tools/npu-sim) needs cargo and rustc >= $NPUOPT_RUST_MIN; without them npuopt is
# built without it. The cargo found here is the one CMake builds with (NPU_SIM_CARGO), and the
# rustc checked is the one beside it, which tools/npu-sim/build.sh uses.
npuopt_check_rust() {
  local cargo="" rustc="" version=""
  if [ -x "$HOME/.cargo/bin/cargo" ] && ! command -v cargo >/dev/null; then
    export PATH="$HOME/.cargo/bin:$PATH"  # rustup's, not on PATH yet (the tests' cargo calls need it)
  fi
  if [ -x "$HOME/.cargo/bin/cargo" ]; then
    cargo="$HOME/.cargo/bin/cargo"  # rustup's: CMake prefers it too
  else
    cargo="$(command -v cargo || true)"
  fi
  if [ -n "$cargo" ]; then
    rustc="$(dirname "$cargo")/rustc"
    [ -x "$rustc" ] || rustc="$(command -v rustc || true)"
  fi
  if [ -n "$rustc" ]; then
    version="$("$rustc" --version 2>/dev/null | awk '{print $2}' | sed 's/-.*//')"
  fi
  if [ -n "$cargo" ] && [ -n "$version" ] && npuopt_version_ge "$version" "$NPUOPT_RUST_MIN"; then
    npuopt_say "rust: $("$rustc" --version), $("$cargo" --version) ($cargo)"
    NPUOPT_BUILD_SIM=ON
    NPUOPT_CMAKE_RUST_ARGS=(-DNPU_SIM_CARGO="$cargo")
    return 0
  fi
  local problem
  if [ -z "$cargo" ] || [ -z "$rustc" ]; then
    problem="cargo/rustc not found"
  elif [ -z "$version" ]; then
    problem="$rustc does not run ('$rustc --version' failed)"
  else
    problem="$rustc is rustc $version, older than $NPUOPT_RUST_MIN"
  fi
  cat >&2 <<MSG
warning: $problem. The simulated NPU (tools/npu-sim) needs cargo and rustc $NPUOPT_RUST_MIN or newer;
npuopt is built without it, and \`npuopt doctor --target npu-sim\` will report the missing toolchain.
Get Rust, then run this script again:
  Debian 12 or newer:   sudo apt-get install cargo rustc     (Debian 12 has rustc 1.63: enough)
  anywhere, or newer:   curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh
  an old rustup:        rustup update stable
MSG
  NPUOPT_BUILD_SIM=OFF
  NPUOPT_CMAKE_RUST_ARGS=()
}

# CI's proof that a fresh Debian 12 builds the simulator with its own Rust (rustc 1.63, the
# crate's rust-version): tools/npu-sim compiled a second time with /usr/bin/cargo from Debian's
# `cargo` package (installed when missing) — every target of release 1.0 (libraries, npuc,
# tests, examples) and release 1.1's libraries and binaries type-checked, npu and npuc
# built (debug: the cheap profile) — and that npuc compiles and checks a kernel with that rustc.
# Into a folder of its own under the build dir, so a re-run is incremental.
# NPUOPT_SKIP_DEBIAN_RUST=1 skips it (not Debian).
npuopt_check_debian_rust() {
  if [ "${NPUOPT_SKIP_DEBIAN_RUST:-0}" = 1 ]; then
    npuopt_say "npu-sim with Debian's rustc: skipped (NPUOPT_SKIP_DEBIAN_RUST=1)"
    return 0
  fi
  npuopt_apt_install cargo rustc
  local target="$NPUOPT_BUILD_DIR/npu-sim-debian-rust" start=$SECONDS
  local sim="$NPUOPT_ROOT/tools/npu-sim"
  local cargo=(env RUSTC=/usr/bin/rustc /usr/bin/cargo)
  local where=(--offline --manifest-path "$sim/Cargo.toml" --target-dir "$target")
  npuopt_say "npu-sim with Debian's Rust: $(/usr/bin/rustc --version), $(/usr/bin/cargo --version) -> $target"
  "${cargo[@]}" check "${where[@]}" --all-targets &&
    "${cargo[@]}" check "${where[@]}" --features npuc/v1_1 --lib --bins &&
    "${cargo[@]}" build "${where[@]}" -p npu -p npuc ||
    npuopt_die "tools/npu-sim does not build with Debian's rustc $(/usr/bin/rustc --version | awk '{print $2}') (its rust-version is $NPUOPT_RUST_MIN): use only what that release has (see the errors above)"
  "$target/debug/npuc" check "$sim/fixtures/fast.rs" >/dev/null ||
    npuopt_die "npuc built with Debian's rustc cannot compile a kernel: run $target/debug/npuc check $sim/fixtures/fast.rs"
  npuopt_say "npu-sim with Debian's Rust: compiled, and its npuc checked a kernel, in $((SECONDS - start)) s"
}

# Configure and build into $NPUOPT_BUILD_DIR; extra arguments go to cmake's configure step.
npuopt_build() {
  npuopt_say "configuring $NPUOPT_BUILD_DIR"
  cmake -S "$NPUOPT_ROOT" -B "$NPUOPT_BUILD_DIR" -DNPUOPT_BUILD_SIM="$NPUOPT_BUILD_SIM" "${NPUOPT_CMAKE_RUST_ARGS[@]}" "$@"
  npuopt_say "building"
  cmake --build "$NPUOPT_BUILD_DIR" -j "$(nproc)"
}

npuopt_setup() {
  npuopt_install_deps
  npuopt_check_rust
  npuopt_build "$@"
}

# Whether a single-node Slurm cluster starts here (root, slurm-wlm, munge): then the Slurm test
# must pass (NPUOPT_REQUIRE_SLURM=1) rather than skip. The probe cluster is stopped at once.
npuopt_probe_slurm() {
  local dir
  dir=$(mktemp -d)
  if "$NPUOPT_ROOT/tools/slurm/local-cluster.sh" start "$dir" >"$dir/probe.log" 2>&1; then
    "$NPUOPT_ROOT/tools/slurm/local-cluster.sh" stop "$dir" >/dev/null 2>&1 || true
    rm -rf "$dir"
    return 0
  fi
  npuopt_say "a single-node Slurm cluster does not start here: the Slurm test will skip"
  tail -n 5 "$dir/probe.log" "$dir"/*.log 2>/dev/null >&2 || true
  "$NPUOPT_ROOT/tools/slurm/local-cluster.sh" stop "$dir" >/dev/null 2>&1 || true
  rm -rf "$dir"
  return 1
}
