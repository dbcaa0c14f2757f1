#!/usr/bin/env bash
# Convert an ImageFolder tree on a Slurm cluster: an array job writes the shards, then one
# dependent job merges them (writes the manifest) and verifies the result.
#
#   examples/slurm_convert.sh SRC DST [extra `packer convert` options, e.g. --codec jpeg --resize 256]
#
# Run it on a login node, from an environment where `packer` is installed; SRC and DST must be
# on storage every compute node sees (NFS, Lustre, GPFS). Settings, as environment variables:
#   TASKS=16          array tasks (each writes every TASKS-th shard)
#   CPUS=8            cores per task (its --workers)
#   TIME=04:00:00     time limit per task
#   BACKEND=lmdb      or hdf5
#   SHARD_SIZE=1GiB   bytes per shard; more shards than TASKS keeps every task busy
#   PARTITION=...     Slurm partition (default: the cluster's)
#   ACCOUNT=...       account to charge (default: yours)
#
# A task that fails or is pre-empted can simply be resubmitted (`sbatch --array=3 ...` with the
# same command): finished shards are kept. `packer merge DST` names any shard still missing and
# the task that owns it. The result is byte-identical to one `packer convert` on one machine.
set -euo pipefail

if [ "$#" -lt 2 ]; then
    sed -n '2,9p' "$0" >&2
    exit 2
fi
SRC=$1
DST=$2
shift 2

TASKS=${TASKS:-16}
CPUS=${CPUS:-8}
TIME=${TIME:-04:00:00}
BACKEND=${BACKEND:-lmdb}
SHARD_SIZE=${SHARD_SIZE:-1GiB}

common=(--parsable --time="$TIME")
[ -n "${PARTITION:-}" ] && common+=(--partition="$PARTITION")
[ -n "${ACCOUNT:-}" ] && common+=(--account="$ACCOUNT")

quote() { printf '%q ' "$@"; }

# Each array task reads SLURM_ARRAY_TASK_ID / _MIN / _COUNT itself: no --task-id needed.
convert_cmd="packer convert $(quote "$SRC" "$DST" --to "$BACKEND" --shard-size "$SHARD_SIZE" "$@")"
convert_cmd+="--workers \"\$SLURM_CPUS_PER_TASK\" --quiet"
array_id=$(sbatch "${common[@]}" --job-name=packer-convert --array="0-$((TASKS - 1))" \
    --cpus-per-task="$CPUS" --output=packer-convert-%A_%a.log --wrap="$convert_cmd")
array_id=${array_id%%;*}

merge_cmd="packer merge $(quote "$DST") && packer verify $(quote "$DST")"
merge_id=$(sbatch "${common[@]}" --job-name=packer-merge --dependency="afterok:$array_id" \
    --cpus-per-task=1 --output=packer-merge-%j.log --wrap="$merge_cmd")
merge_id=${merge_id%%;*}

echo "submitted: array job $array_id ($TASKS tasks) -> merge job $merge_id"
echo "watch:     squeue -j $array_id,$merge_id"
echo "then:      packer info $DST"
