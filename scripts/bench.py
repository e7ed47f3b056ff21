"""Benchmarks in one run: recsys vs fastai and Surprise on ML-100K u1, throughput on synthetic
ML-1M/10M/25M shapes, load times. Writes bench.md and bench.json: `python scripts/bench.py`.

Every measurement runs in a fresh process (this script re-invoked with --worker) so that its peak
RSS and timing are its own. Needs the real ML-100K (--data-dir or $RECSYS_DATA) for the u1 rows.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd

from recsys import benchmark
from recsys.cli import check_device, run
from recsys.errors import RecsysError
from recsys.report import markdown_table
from recsys.runs import write_json

LARGE = {"sparse": True, "batch_size": 4096}  # what the README recommends past ~100K users


def jobs(
    folder: Path | None, shapes: list[str], scratch: Path, repeats: int, device: str = "cpu"
) -> list[dict[str, Any]]:
    """Every measurement to run, as the keyword arguments of one worker. The u1 contenders take
    turns, `repeats` rounds, so that a slow spell of the machine does not fall on one of them.
    recsys trains on `device`; fastai picks its own (a GPU where there is one), Surprise the CPU."""
    found: list[dict[str, Any]] = []
    if folder is not None:
        contenders = ("recsys-dotbias", "fastai", "surprise-svd")
        found += [
            {"task": "u1", "contender": name, **({"device": device} if name.startswith("recsys") else {})}
            for _ in range(repeats)
            for name in contenders
        ]
        found.append({"task": "load", "name": "ml-100k"})
    for shape in shapes:
        tensors = str(scratch / f"{shape}.pt")
        found.append({"task": "generate", "shape": shape, "path": tensors})
        large = shape != "ml-1m"
        for model in ("dot", "dotbias", "embproj", *(() if large else ("linear",))):
            found.append(
                {
                    "task": "throughput",
                    "shape": shape,
                    "model": model,
                    "tensors": tensors,
                    "device": device,
                    **(LARGE if large else {}),
                }
            )
    return found


def worker(spec: dict[str, Any], folder: Path | None) -> dict[str, Any]:
    """Run one measurement in this process."""
    task = spec.pop("task")
    if task == "u1":
        assert folder is not None
        contender = spec.pop("contender")
        measure = {
            "recsys-dotbias": benchmark.bench_recsys,
            "fastai": benchmark.bench_fastai,
            "surprise-svd": benchmark.bench_surprise,
        }[contender]
        return {"contender": contender, **measure(folder, **spec)}
    if task == "load":
        assert folder is not None
        return benchmark.bench_load(spec["name"], folder)
    if task == "generate":
        return benchmark.generate_shape(spec["shape"], Path(spec["path"]))
    return benchmark.bench_throughput(spec.pop("shape"), spec.pop("model"), Path(spec.pop("tensors")), **spec)


def run_worker(spec: dict[str, Any], folder: Path | None) -> dict[str, Any]:
    """Start a fresh process for `spec`; add its wall time and peak RSS, or the error it reported."""
    command = [sys.executable, __file__, "--worker", json.dumps(spec)]
    if folder is not None:
        command += ["--ml100k", str(folder)]
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if result.returncode != 0:
        lines = result.stderr.strip().splitlines() or ["no output"]
        return {**spec, "error": lines[-1], "wall_seconds": wall}
    return {**json.loads(result.stdout.strip().splitlines()[-1]), "wall_seconds": wall}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data-dir", type=Path, default=None, help="folder holding ml-100k/ (else $RECSYS_DATA)"
    )
    parser.add_argument("--shapes", nargs="*", choices=list(benchmark.SHAPES), default=list(benchmark.SHAPES),
                        help="synthetic shapes for the throughput runs")  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("reports/bench"), help="folder for bench.md/json")
    parser.add_argument("--repeats", type=int, default=3,
                        help="rounds of the u1 comparison; the table gives each one's median")  # fmt: skip
    parser.add_argument("--device", default="cpu",
                        help="where recsys trains: cpu or cuda (fastai picks its own device)")  # fmt: skip
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--ml100k", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.repeats < 1:
        raise RecsysError(f"--repeats must be at least 1, got {args.repeats}")
    check_device(args.device)
    if args.worker is not None:
        result = worker(json.loads(args.worker), args.ml100k)
        print(json.dumps({**result, "peak_rss_mb": benchmark.peak_rss_mb()}))
        return 0

    root = args.data_dir or (Path(os.environ["RECSYS_DATA"]) if os.environ.get("RECSYS_DATA") else None)
    folder = root / "ml-100k" if root is not None and (root / "ml-100k" / "u.data").is_file() else None
    if folder is None:
        print("ML-100K not found (--data-dir or $RECSYS_DATA): skipping the u1 comparison", file=sys.stderr)
    if args.out.exists() and not args.out.is_dir():
        raise RecsysError(f"--out {args.out} is a file; name a folder")
    with tempfile.TemporaryDirectory() as scratch:
        specs = jobs(folder, args.shapes, Path(scratch), args.repeats, args.device)
        results = []
        for spec in specs:
            print(f"running {spec}", flush=True)
            results.append(run_worker(dict(spec), folder))
            print(f"  {results[-1]}", flush=True)
    tables = {
        task: pd.DataFrame([r for r, s in zip(results, specs, strict=True) if s["task"] == task])
        for task in ("u1", "throughput", "generate", "load")
    }
    if not tables["u1"].empty and "error" not in tables["u1"]:
        medians = benchmark.median_runs(tables["u1"].to_dict(orient="records"))
        tables["u1"] = benchmark.ratio_table(medians.to_dict(orient="records"), "recsys-dotbias")
    lines = [
        "# Benchmarks",
        "",
        f"Run on {time.strftime('%Y-%m-%d')}, one process per row; see recsys/benchmark.py.",
        "",
    ]
    titles = {
        "u1": "ML-100K u1: recsys vs fastai vs Surprise",
        "throughput": "Training throughput (one epoch; peak RSS of the training process)",
        "generate": "Generating the synthetic shapes",
        "load": "Loading and encoding real data",
    }
    for task, table in tables.items():
        if not table.empty:
            lines += [f"## {titles[task]}", "", markdown_table(table), ""]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench.md").write_text("\n".join(lines))
    write_json(args.out / "bench.json", {task: t.to_dict(orient="records") for task, t in tables.items()})
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    run(main)
