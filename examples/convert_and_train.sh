#!/usr/bin/env bash
# Convert an ImageFolder tree, check it, measure it and train on it: the whole path on one machine.
#
#   examples/convert_and_train.sh SRC DST [extra train_classifier.py options, e.g. VAL --fast]
#   examples/convert_and_train.sh          # a generated demo tree in a temporary directory
#
# Steps: packer convert SRC DST (--resume: a re-run keeps finished shards and skips a complete
# DST), packer verify DST, packer bench DST --against SRC (folder vs packed reads, the fast
# pipeline), then examples/train_classifier.py DST, under torchrun when NPROC > 1, with a
# checkpoint it resumes from when run again. Settings, as environment variables:
#   BACKEND=lmdb        or hdf5
#   NPROC=1             training processes on this machine (one per GPU)
#   BENCH=1             0 skips the benchmark
#   LIMIT=500           samples the benchmark reads
#   CHECKPOINT=DST.pt   where training saves after every epoch
#   PYTHON=python       the interpreter that has packer and torch
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
PYTHON=${PYTHON:-python}
BACKEND=${BACKEND:-lmdb}
NPROC=${NPROC:-1}
BENCH=${BENCH:-1}
LIMIT=${LIMIT:-500}

if [ "$#" -eq 1 ]; then
    sed -n '2,5p' "$0" >&2
    exit 2
fi
if [ "$#" -eq 0 ]; then
    work=$(mktemp -d "${TMPDIR:-/tmp}/packer-e2e-XXXXXX")
    trap 'rm -rf "$work"' EXIT
    echo "== packer demo $work/demo (a generated tree: 300 images in 4 classes, 3 broken files)"
    # It leaves images/ (the tree), lmdb/ and hdf5/ (its own conversions); we convert images/ again.
    packer demo "$work/demo" --no-speed >/dev/null  # the tree is what we need; checks still run
    SRC=$work/demo/images
    DST=$work/packed
    set -- --arch tiny --size 64 --batch-size 32 --epochs 2 --log-every 0
    LIMIT=${LIMIT_DEMO:-200}
else
    SRC=$1
    DST=${2%/}
    shift 2
fi
CHECKPOINT=${CHECKPOINT:-$DST.pt}

echo "== packer convert $SRC $DST --to $BACKEND"
packer convert "$SRC" "$DST" --to "$BACKEND" --resume
echo "== packer verify $DST"
packer verify "$DST" --quiet
if [ "$BENCH" != 0 ]; then
    echo "== packer bench $DST --against $SRC"
    packer bench "$DST" --against "$SRC" --pipeline fast --limit "$LIMIT" --repeats 1
fi

train=("$here/train_classifier.py" "$DST" --checkpoint "$CHECKPOINT" --resume "$@")
if [ "$NPROC" -gt 1 ]; then
    echo "== torchrun --nproc_per_node $NPROC examples/train_classifier.py $DST $*"
    torchrun --standalone --nproc_per_node "$NPROC" "${train[@]}"
else
    echo "== $PYTHON examples/train_classifier.py $DST $*"
    "$PYTHON" "${train[@]}"
fi
echo "== done: dataset $DST, checkpoint $CHECKPOINT"
