#!/usr/bin/env bash
# Train with torchrun on this machine (or, with NNODES/NODE_RANK/MASTER_ADDR, on several).
#   scripts/dist_train.sh GPUS CONFIG [extra `up train` args...]
#   scripts/dist_train.sh 4 configs/cls/digits_resnet18.yaml --work-dir runs/r18
# Environment: TORCHRUN (default torchrun; its python runs the workers), NNODES (default 1),
#   NODE_RANK (default 0), MASTER_ADDR (default 127.0.0.1), PORT (default: a free port when
#   NNODES=1, else 29500). On a CPU-only machine GPUS is the number of processes (gloo).
set -euo pipefail
if [ $# -lt 2 ]; then
    echo "usage: $0 GPUS CONFIG [extra up train args...]" >&2
    exit 2
fi
GPUS=$1
CONFIG=$2
shift 2
TORCHRUN=${TORCHRUN:-torchrun}
NNODES=${NNODES:-1}
if [ "$NNODES" = 1 ] && [ -z "${PORT:-}" ]; then
    RDZV=(--standalone)  # torchrun picks a free port: concurrent jobs on one box never collide
else
    RDZV=(--nnodes="$NNODES" --node_rank="${NODE_RANK:-0}" --master_addr="${MASTER_ADDR:-127.0.0.1}"
          --master_port="${PORT:-29500}")
fi
exec "$TORCHRUN" "${RDZV[@]}" --nproc_per_node="$GPUS" -m up_trainer train --config "$CONFIG" "$@"
