#!/usr/bin/env bash
# Train on a SLURM cluster: one srun task per GPU, `up train --launch slurm` in each.
#   scripts/train.sh PARTITION NODES GPUS_PER_NODE CONFIG [extra `up train` args...]
#   scripts/train.sh gpu 2 8 configs/cls/digits_resnet18.yaml --work-dir runs/r18 --opts trainer.max_epoch=90
# Environment: PYTHON (default python), SRUN (default srun), JOB_NAME, CPUS_PER_TASK (default 4),
#   SRUN_ARGS (extra srun flags, e.g. "--time=2-00:00:00 --qos=high"), PORT (rendezvous port;
#   default derived from the job id).
set -euo pipefail
if [ $# -lt 4 ]; then
    echo "usage: $0 PARTITION NODES GPUS_PER_NODE CONFIG [extra up train args...]" >&2
    exit 2
fi
PARTITION=$1
NODES=$2
GPUS=$3
CONFIG=$4
shift 4
PYTHON=${PYTHON:-python}
SRUN=${SRUN:-srun}
PORT_ARGS=()
if [ -n "${PORT:-}" ]; then PORT_ARGS=(--port "$PORT"); fi
# shellcheck disable=SC2086  # SRUN_ARGS is a list of flags on purpose
exec "$SRUN" --partition="$PARTITION" --job-name="${JOB_NAME:-up-train}" \
    --nodes="$NODES" --ntasks=$((NODES * GPUS)) --ntasks-per-node="$GPUS" --gres=gpu:"$GPUS" \
    --cpus-per-task="${CPUS_PER_TASK:-4}" --kill-on-bad-exit=1 ${SRUN_ARGS:-} \
    "$PYTHON" -m up_trainer train --launch slurm --nm "$NODES" --ng "$GPUS" "${PORT_ARGS[@]}" \
    --config "$CONFIG" "$@"
