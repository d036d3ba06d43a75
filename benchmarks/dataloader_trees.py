"""benchmarks/dataloader.py of several checkouts of the project, interleaved: images/s of one
pipeline per tree, the trees' passes alternating (their order rotating) within each round and
worker count, medians over the rounds. For "before / after" figures on a shared machine whose
speed drifts over minutes: each tree's pass runs seconds from the others'.

    python benchmarks/dataloader_trees.py --tree float=/tmp/float --tree start=/tmp/start --tree new=. \\
        --pipelines yolox --workers 0 1 2 --rounds 3 [--cache new]

Each tree runs its own copy of this folder's dataloader.py (``--rounds 1``, one worker count at
a time) with this Python; ``--cache NAME`` adds that tree's ``cache: ram``
columns (its second, cached pass: ``ram e2``). Check out an older tree with ``git worktree add
--detach /tmp/start <commit>``.
"""
import argparse
import os
import statistics
import subprocess
import sys


def one_pass(tree, pipeline, workers, cache, det_images):
    """{column: images/s} of one run of ``tree``'s benchmark: 'up', and 'ram e2' with the cache."""
    command = [sys.executable, os.path.join(tree, "benchmarks", "dataloader.py"), "--pipelines", pipeline,
               "--workers", str(workers), "--rounds", "1", "--det-images", str(det_images)]
    script = open(command[1]).read()
    if not cache and "--no-cache" in script:
        command.append("--no-cache")
    out = subprocess.run(command, capture_output=True, text=True, cwd=tree, check=True).stdout
    for line in out.splitlines():
        cells = line.split()
        if len(cells) >= 4 and cells[0] == pipeline and cells[1] == str(workers):
            found = {"up": float(cells[3])}
            if cache and len(cells) >= 7 and cells[6] != "-":
                found["ram e2"] = float(cells[6])
            return found
    raise RuntimeError(f"{tree}: no {pipeline} row in\n{out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", action="append", required=True, help="NAME=PATH of a checkout (repeatable)")
    ap.add_argument("--pipelines", nargs="+", default=["yolox"])
    ap.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--det-images", type=int, default=64)
    ap.add_argument("--cache", nargs="*", default=[], help="trees whose cache: ram second pass is measured too")
    args = ap.parse_args()
    trees = [tuple(t.split("=", 1)) for t in args.tree]
    print(f"{len(trees)} trees, {args.rounds} rounds, load average {os.getloadavg()[0]:.1f}; images/s (median)",
          flush=True)
    for pipeline in args.pipelines:
        for workers in args.workers:
            rates = {}
            for r in range(args.rounds):
                for i in range(len(trees)):
                    name, path = trees[(i + r) % len(trees)]
                    for column, rate in one_pass(os.path.abspath(path), pipeline, workers, name in args.cache,
                                                 args.det_images).items():
                        rates.setdefault((name, column), []).append(rate)
            first = trees[0][0]
            base = statistics.median(rates[(first, "up")])
            cells = [f"{name} {column} {statistics.median(v):.2f} ({'/'.join(f'{x:.1f}' for x in v)}; "
                     f"x{statistics.median(v) / base:.2f})" for (name, column), v in rates.items()]
            print(f"{pipeline} workers {workers}: " + ", ".join(cells) +
                  f"  [load {os.getloadavg()[0]:.1f}]", flush=True)
    print(f"load average after: {' '.join(f'{v:.1f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
