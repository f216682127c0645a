"""Graph snapshot arithmetic: building a CSR graph of 1M edges over 100k nodes, and merging 1k new edges
into it against rebuilding it (what the first deep query after an edge write pays, see graph.store).

CPU time of this process (numpy sorts on one thread), best of a few runs, so a busy machine moves the
figures little. Targets: the build under 0.9 s; a merge of 1k edges under half a rebuild.

    make bench-graph            # or: .venv/bin/python bench/bench_graph.py [--runs 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from graph.algorithms import build_csr, merge_csr

BUILD_TARGET_SECONDS = 0.9
MERGE_TARGET_RATIO = 0.5


def _cpu(call: object) -> float:
    assert callable(call)
    start = time.process_time()
    call()
    return time.process_time() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--edges", type=int, default=1_000_000)
    parser.add_argument("--new", type=int, default=1_000, help="edges merged into the built graph")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    n, m, k = args.nodes, args.edges, args.new
    src, dst = rng.integers(0, n, m + k), rng.integers(0, n, m + k)
    weights = np.ones(m + k, dtype=np.float32)  # the common case: every edge at the default weight
    types = rng.integers(0, 15, m + k).astype(np.int8)
    build = min(_cpu(lambda: build_csr(n, src[:m], dst[:m], weights[:m], types[:m])) for _ in range(args.runs))
    old = build_csr(n, src[:m], dst[:m], weights[:m], types[:m])
    merge = min(
        _cpu(lambda: merge_csr(old, np.arange(n), n, src[m:], dst[m:], weights[m:], types[m:]))
        for _ in range(args.runs)
    )
    rebuild = min(_cpu(lambda: build_csr(n, src, dst, weights, types)) for _ in range(args.runs))
    ratio = merge / rebuild
    print(f"build_csr, {m:,} edges over {n:,} nodes: {build:.3f} s CPU (target < {BUILD_TARGET_SECONDS} s)")
    print(
        f"merge_csr of {k:,} new edges: {merge * 1000:.1f} ms against a rebuild of {rebuild * 1000:.1f} ms, "
        f"ratio {ratio:.3f} (target < {MERGE_TARGET_RATIO})"
    )
    met = build < BUILD_TARGET_SECONDS and ratio < MERGE_TARGET_RATIO
    print("targets met" if met else "TARGET MISSED")
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
