#!/usr/bin/env bash
# The package on aarch64 (most Ascend servers: Atlas 800 with Kunpeng), run under qemu-user emulation
# on an x86_64 machine: an arm64 Debian 12 root (debootstrap), this checkout copied in, then in it
# the README's two commands: tools/bootstrap.sh (the aarch64 wheels: numpy, onnxruntime, tritonclient,
# nvidia-pytriton 0.7.0 = tritonserver 2.51 aarch64), tools/demo.sh (generate -> tritonserver aarch64
# -> the answer checked against ONNX Runtime) and the unit tests.
#
#   sudo nice -n 19 bash tools/aarch64_smoke.sh [pytest arguments for the unit tests]
#
# Needs root (debootstrap, chroot, mounts, binfmt_misc) and network to Debian and PyPI. Slow: every
# aarch64 instruction is emulated (docs/platforms.md has the figures); not part of CI. The root is
# kept in GE_AARCH64_ROOT (default /var/tmp/ge-aarch64) and re-used: a second run only re-copies the
# checkout and re-runs the steps. On a real aarch64 host run the two commands themselves instead:
# bash tools/test.sh tests/unit && bash tools/demo.sh.
set -euo pipefail
checkout="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="${GE_AARCH64_ROOT:-/var/tmp/ge-aarch64}"
rootfs="$work/rootfs"
mirror="${GE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
log="$work/smoke.log"

say() { echo "aarch64_smoke: $*" | tee -a "$log"; }
fail() { say "$*"; exit 1; }

[ "$(id -u)" = 0 ] || fail "needs root (debootstrap, chroot, mounts, binfmt_misc)"
mkdir -p "$work"
: >"$log"

# 1. qemu-user-static and debootstrap from Debian; binfmt_misc mounted, aarch64 registered with flag F
#    (the interpreter is opened at registration, so it runs inside the chroot without a copy there).
missing=()
command -v qemu-aarch64-static >/dev/null || missing+=(qemu-user-static)
command -v debootstrap >/dev/null || missing+=(debootstrap)
if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]} (apt-get)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
binfmt=/proc/sys/fs/binfmt_misc
if [ ! -e "$binfmt/register" ]; then
    mount -t binfmt_misc binfmt_misc "$binfmt" ||
        fail "cannot mount binfmt_misc at $binfmt (a container without that privilege): run this on an x86_64 host or VM as root, or on an aarch64 host the two commands directly"
fi
if [ ! -e "$binfmt/qemu-aarch64" ]; then
    conf=/usr/lib/binfmt.d/qemu-aarch64.conf
    [ -f "$conf" ] || fail "$conf is missing (qemu-user-static installs it)"
    cat "$conf" >"$binfmt/register" || fail "cannot register qemu-aarch64 in $binfmt"
fi
grep -q '^enabled' "$binfmt/qemu-aarch64" || fail "binfmt_misc has qemu-aarch64 but it is disabled"
grep -q '^flags:.*F' "$binfmt/qemu-aarch64" ||
    fail "qemu-aarch64 is registered without flag F: the chroot cannot find its interpreter"

step_started=0
timings=()
start_step() { say "$1"; step_started=$SECONDS; }
end_step() { timings+=("$1: $((SECONDS - step_started)) s"); }

# 2. The arm64 Debian 12 root, once. libpython3.11: the Python backend stub links it.
if [ ! -f "$rootfs/.ge-debootstrap-done" ]; then
    start_step "debootstrap arm64 Debian 12 into $rootfs"
    rm -rf "$rootfs"
    debootstrap --arch=arm64 --variant=minbase \
        --include=python3,python3-venv,libpython3.11,ca-certificates,procps \
        bookworm "$rootfs" "$mirror" >>"$log" 2>&1 || fail "debootstrap failed (its log: $log)"
    touch "$rootfs/.ge-debootstrap-done"
    end_step "debootstrap"
fi
[ "$(chroot "$rootfs" uname -m)" = aarch64 ] || fail "the chroot does not run as aarch64 (uname -m)"

# 3. Mounts the server and the tests need (/proc, /dev with /dev/shm for the Python backend); the
#    public .om samples beside the checkout, read-only, when there; all undone on exit.
mounted=()
cleanup() {
    local index
    for ((index = ${#mounted[@]} - 1; index >= 0; index--)); do umount -R -l "${mounted[index]}" 2>/dev/null || true; done
}
trap cleanup EXIT
bind() {  # SOURCE TARGET [ro]
    mkdir -p "$2"
    mount --rbind "$1" "$2" && mount --make-rslave "$2" && mounted+=("$2")
    if [ "${3:-}" = ro ]; then mount -o remount,bind,ro "$2"; fi
}
mkdir -p "$rootfs/proc" && mount -t proc proc "$rootfs/proc" && mounted+=("$rootfs/proc")
bind /dev "$rootfs/dev"
# No /sys: under qemu-user it is the x86_64 host's, and onnxruntime's CPU probe (cpuinfo) on aarch64
# crashes parsing it (SIGSEGV at import); without it, it warns and goes on. A real arm64 host has its own.
cp -L /etc/resolv.conf "$rootfs/etc/resolv.conf"
# The root trusts the certificate authorities the host trusts (a TLS-inspecting proxy's among them).
host_cas=/etc/ssl/certs/ca-certificates.crt
if [ -f "$host_cas" ]; then cp -L "$host_cas" "$rootfs/etc/ssl/certs/host-ca-certificates.crt"; fi
if [ -d "$checkout/../shared" ]; then bind "$(cd "$checkout/../shared" && pwd)" "$rootfs/shared" ro; fi

# 4. This checkout (tracked and untracked files, not ignored ones) into /src, keeping /src/.venv.
src="$rootfs/src"
mkdir -p "$src"
find "$src" -mindepth 1 -maxdepth 1 ! -name .venv -exec rm -rf {} +
(cd "$checkout" && git ls-files -co --exclude-standard -z | tar --null --ignore-failed-read -T - -cf -) | tar -xf - -C "$src"

in_root() {  # COMMAND...: run in the arm64 root, in /src, with a clean environment
    chroot "$rootfs" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        LANG=C.UTF-8 CI="${CI:-}" SSL_CERT_FILE=/etc/ssl/certs/host-ca-certificates.crt \
        PIP_CERT=/etc/ssl/certs/host-ca-certificates.crt bash -c 'cd /src && "$@"' bash "$@"
}

# 5. The README's set-up on aarch64: tools/bootstrap.sh (its apt-get installs run in the root too).
start_step "tools/bootstrap.sh (aarch64 wheels)"
in_root bash tools/bootstrap.sh 2>&1 | tee -a "$log"
end_step "bootstrap"
in_root .venv/bin/python -c 'import platform, sys, numpy, onnxruntime, tritonclient; print("python", sys.version.split()[0], platform.machine(), "numpy", numpy.__version__, "onnxruntime", onnxruntime.__version__)' | tee -a "$log"

# 6. The main job, then the unit tests (emulation is slow: a longer per-test timeout).
status=0
start_step "tools/demo.sh (generate -> tritonserver aarch64 -> the answer)"
in_root bash tools/demo.sh 2>&1 | tee -a "$log" || status=1
end_step "demo"
start_step "unit tests: pytest tests/unit $*"
in_root .venv/bin/python -m pytest -q -p no:cacheprovider --timeout=3600 tests/unit "$@" 2>&1 | tee -a "$log" ||
    status=1
end_step "unit tests"

say "timings: ${timings[*]}"
say "log: $log"
exit "$status"
