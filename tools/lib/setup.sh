# Shared by tools/quickstart-run.sh and tools/quickstart-test.sh (sourced, not run):
# install what is missing on a Debian machine, check the Rust toolchain, configure and build.

NPUOPT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
NPUOPT_BUILD_DIR="${NPUOPT_BUILD_DIR_OVERRIDE:-$NPUOPT_ROOT/build}"

# Debian packages npuopt builds and runs with.
NPUOPT_APT_PACKAGES=(
  build-essential cmake pkg-config
  libsqlite3-dev sqlite3 nlohmann-json3-dev libcurl4-openssl-dev libyaml-cpp-dev libeigen3-dev
  libspdlog-dev libfmt-dev doctest-dev libcli11-dev
  libmuparser-dev libcmark-gfm-dev libcmark-gfm-extensions-dev
  libcpp-httplib-dev libkainjow-mustache-dev zlib1g-dev
  bubblewrap graphviz python3
)

npuopt_say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
npuopt_die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# Install the packages that are missing (idempotent: nothing happens when all are present).
npuopt_install_deps() {
  local missing=() package
  for package in "${NPUOPT_APT_PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$package")
    fi
  done
  if [ "${#missing[@]}" -eq 0 ]; then
    npuopt_say "system packages: all present"
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

# The simulator (tools/npu-sim) needs cargo and rustc; without them npuopt builds without it.
npuopt_check_rust() {
  if [ -x "$HOME/.cargo/bin/cargo" ] && ! command -v cargo >/dev/null; then
    export PATH="$HOME/.cargo/bin:$PATH"
  fi
  if command -v cargo >/dev/null && command -v rustc >/dev/null; then
    npuopt_say "rust: $(rustc --version), $(cargo --version)"
    NPUOPT_BUILD_SIM=ON
  else
    cat >&2 <<'MSG'
warning: cargo/rustc not found. The simulated NPU (tools/npu-sim) needs them; npuopt is built
without it, and `npuopt doctor --target npu-sim` will report the missing toolchain.
Get Rust with rustup:  curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh
                  or:  sudo apt-get install cargo rustc
then run this script again.
MSG
    NPUOPT_BUILD_SIM=OFF
  fi
}

# Configure and build into $NPUOPT_BUILD_DIR; extra arguments go to cmake's configure step.
npuopt_build() {
  npuopt_say "configuring $NPUOPT_BUILD_DIR"
  cmake -S "$NPUOPT_ROOT" -B "$NPUOPT_BUILD_DIR" -DNPUOPT_BUILD_SIM="$NPUOPT_BUILD_SIM" "$@"
  npuopt_say "building"
  cmake --build "$NPUOPT_BUILD_DIR" -j "$(nproc)"
}

npuopt_setup() {
  npuopt_install_deps
  npuopt_check_rust
  npuopt_build "$@"
}
