#!/usr/bin/env bash
# Evaluate a checkpoint with torchrun: sharded over GPUS processes, gathered on rank 0.
#   scripts/dist_test.sh GPUS CONFIG CHECKPOINT [extra `up train` args...]
# Environment: as scripts/dist_train.sh.
set -euo pipefail
if [ $# -lt 3 ]; then
    echo "usage: $0 GPUS CONFIG CHECKPOINT [extra up train args...]" >&2
    exit 2
fi
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
GPUS=$1
CONFIG=$2
CKPT=$3
shift 3
exec "$HERE/dist_train.sh" "$GPUS" "$CONFIG" --evaluate --resume "$CKPT" "$@"
