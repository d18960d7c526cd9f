"""The wheels the GPU check needs beyond the GPU image, gathered for a machine that reaches no registry.

    python -m benchmarks.gpu_wheels [--dest .gpu_wheels] [--limit-mib 60]

The GPU image has CUDA PyTorch, transformers, peft, accelerate, aiohttp, numpy, pyarrow,
psutil and pytest, but not the pure-Python packages ``agentrl``'s roles import on the check's
path. Each is named here with its version (``--no-deps``: its dependencies are either in the
image or named too) and downloaded for manylinux x86-64 / CPython 3.12 into ``--dest`` (ignored
by git). The script reports every wheel's size and the total with the working tree's tracked
files, and fails when they exceed ``--limit-mib`` (what a device call carries is 64 MiB).
On the GPU machine::

    pip install --no-index --no-deps --target /tmp/agentrl-wheels .gpu_wheels/*.whl
    PYTHONPATH=/tmp/agentrl-wheels python -m benchmarks.gpu_check
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

WHEELS: tuple[str, ...] = (
    "tensordict==0.15.3",  # core/batch.py's Batch
    "cloudpickle==3.1.3",  # tensordict
    "pyvers==0.2.3",  # tensordict
    "omegaconf==2.4.0",  # config/loader.py (PyYAML is in the image)
    "jsonschema==4.26.0",  # tools/spec.py
    "jsonschema-specifications==2025.9.1",  # jsonschema
    "referencing==0.37.0",  # jsonschema
    "rpds-py==2026.9.1",  # referencing (compiled: the cp312 manylinux wheel)
)
# agentrl's dependencies that the GPU image lacks and the check must run without (Ray, vLLM, the
# retriever's and the tools' packages): the CPU mode's test makes each unimportable.
IMAGE_LACKS: tuple[str, ...] = (
    "ray",
    "vllm",
    "faiss",
    "onnxruntime",
    "bm25s",
    "Stemmer",
    "matplotlib",
    "mcp",
    "orjson",
    "openai",
    "pandas",
    "tensorboard",
    "wandb",
    "gguf",
)
PLATFORM = ["--platform", "manylinux2014_x86_64", "--python-version", "3.12", "--implementation", "cp"]


def tracked_bytes(root: Path) -> int:
    """Bytes of the files git tracks plus untracked ones it does not ignore (what a call carries)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        check=True,
        capture_output=True,
    ).stdout
    paths = [root / p for p in listed.decode().split("\0") if p]
    return sum(p.stat().st_size for p in paths if p.is_file())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dest", default=".gpu_wheels")
    parser.add_argument("--limit-mib", type=float, default=60.0)
    args = parser.parse_args(argv)
    dest = Path(args.dest)
    dest.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", *PLATFORM]
    subprocess.run([*command, "--dest", str(dest), *WHEELS], check=True)
    names = {spec.split("==")[0].replace("-", "_").lower() for spec in WHEELS}
    wheels = sorted(w for w in dest.glob("*.whl") if w.name.split("-")[0].lower() in names)
    for wheel in wheels:
        print(f"{wheel.stat().st_size / 2**20:8.2f} MiB  {wheel.name}")
    wheel_bytes = sum(w.stat().st_size for w in wheels)
    tree = tracked_bytes(Path.cwd())
    total = (wheel_bytes + tree) / 2**20
    print(f"wheels {wheel_bytes / 2**20:.2f} MiB + working tree {tree / 2**20:.2f} MiB = {total:.2f} MiB")
    if len(wheels) != len(WHEELS):
        print(f"expected {len(WHEELS)} wheels, found {len(wheels)} in {dest}", file=sys.stderr)
        return 1
    if total > args.limit_mib:
        print(f"over the limit of {args.limit_mib} MiB", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
