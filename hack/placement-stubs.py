"""Generate the placement plugin API's Python messages and gRPC stubs (with their type stubs)
from libs/placement/proto into libs/placement/src, or check that the committed ones are current.

    .venv/bin/python hack/placement-stubs.py [--check]

The generator is grpcio-tools (protoc and its Python and gRPC plugins) with mypy-protobuf for the
``.pyi`` files, at the versions the dev extra pins, so that the output is the same on every machine.
"""

import argparse
import filecmp
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROTO_ROOT = REPO / "libs/placement/proto"
OUT = REPO / "libs/placement/src"
PROTOS = ["trainerop_placement/v1/placement.proto"]
GENERATED = ["placement_pb2.py", "placement_pb2.pyi", "placement_pb2_grpc.py", "placement_pb2_grpc.pyi"]


def generate(into: Path) -> None:
    """Run protoc with the Python, gRPC and mypy plugins (the plugins are found next to Python)."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    outs = [f"--{kind}_out={into}" for kind in ("python", "grpc_python", "mypy", "mypy_grpc")]
    command = [sys.executable, "-m", "grpc_tools.protoc", f"-I{PROTO_ROOT}", *outs, *PROTOS]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"protoc failed: {done.stderr.strip()}\nInstall the dev extra: hack/dev-env.sh")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="fail when the committed files are not current")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        stale = []
        for proto in PROTOS:
            folder = Path(proto).parent
            for name in GENERATED:
                fresh, committed = Path(tmp) / folder / name, OUT / folder / name
                if args.check:
                    if not committed.exists() or not filecmp.cmp(fresh, committed, shallow=False):
                        stale.append(str(committed.relative_to(REPO)))
                else:
                    committed.write_bytes(fresh.read_bytes())
        if stale:
            sys.exit("not current (run .venv/bin/python hack/placement-stubs.py): " + ", ".join(stale))
        print("placement stubs are current" if args.check else f"wrote {len(GENERATED) * len(PROTOS)} files to {OUT}")


if __name__ == "__main__":
    main()
