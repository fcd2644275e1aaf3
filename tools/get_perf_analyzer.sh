#!/usr/bin/env bash
# Puts Triton's perf_analyzer 2.51.0 (for the tritonserver 2.51.0 that nvidia-pytriton ships) and
# the two libraries it lacks on a CPU machine into a scratch folder, outside the project venv:
#   DEST/perf_analyzer, DEST/lib/{libcudart.so.12,libb64.so.0d}
# Usage: bash tools/get_perf_analyzer.sh [DEST=/tmp/perf_analyzer]
# Then: LD_LIBRARY_PATH=DEST/lib DEST/perf_analyzer ...   (python -m tools.bench SCENARIO --perf-analyzer DEST/perf_analyzer
# sets LD_LIBRARY_PATH itself). Needs pip and apt-get (Debian package libb64-0d).
set -euo pipefail
dest="${1:-/tmp/perf_analyzer}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-$root/.venv/bin/python}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$dest/lib"
"$python" -m pip download --quiet --no-deps -d "$work" tritonclient==2.51.0 nvidia-cuda-runtime-cu12==12.6.77
(cd "$work" && apt-get download libb64-0d >/dev/null 2>&1 || { apt-get update -qq && apt-get download libb64-0d; })
"$python" - "$work" "$dest" <<'PY'
import pathlib, shutil, sys, zipfile
work, dest = map(pathlib.Path, sys.argv[1:])
for wheel, member, target in (
    ("tritonclient-2.51.0-*.whl", "tritonclient-2.51.0.data/data/bin/perf_analyzer", dest / "perf_analyzer"),
    ("nvidia_cuda_runtime_cu12-*.whl", "nvidia/cuda_runtime/lib/libcudart.so.12", dest / "lib" / "libcudart.so.12"),
):
    with zipfile.ZipFile(next(work.glob(wheel))) as archive, archive.open(member) as source, target.open("wb") as out:
        shutil.copyfileobj(source, out)
(dest / "perf_analyzer").chmod(0o755)
PY
dpkg -x "$work"/libb64-0d_*.deb "$work/b64"
cp "$work"/b64/usr/lib/x86_64-linux-gnu/libb64.so.0d* "$dest/lib/"
LD_LIBRARY_PATH="$dest/lib" "$dest/perf_analyzer" --version
echo "perf_analyzer ready: LD_LIBRARY_PATH=$dest/lib $dest/perf_analyzer"
