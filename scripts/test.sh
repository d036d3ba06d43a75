#!/usr/bin/env bash
# Evaluate a checkpoint on a SLURM cluster, sharded over every task and gathered on rank 0.
#   scripts/test.sh PARTITION NODES GPUS_PER_NODE CONFIG CHECKPOINT [extra `up train` args...]
# Metrics and results go to saver.results_dir (relative to --work-dir when given).
# Environment: as scripts/train.sh.
set -euo pipefail
if [ $# -lt 5 ]; then
    echo "usage: $0 PARTITION NODES GPUS_PER_NODE CONFIG CHECKPOINT [extra up train args...]" >&2
    exit 2
fi
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PARTITION=$1
NODES=$2
GPUS=$3
CONFIG=$4
CKPT=$5
shift 5
JOB_NAME=${JOB_NAME:-up-test} exec "$HERE/train.sh" "$PARTITION" "$NODES" "$GPUS" "$CONFIG" \
    --evaluate --resume "$CKPT" "$@"
