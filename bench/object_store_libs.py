"""obstore against fsspec/s3fs on one S3 server: put, list and get of many shard-sized objects.

    python bench/object_store_libs.py [--objects 64] [--kb 256]

Why the pool's object-store code uses obstore: both libraries talk to the same
S3 server (moto's, started here in its own process), interleaved round by
round, best of 3; ratios are obstore's speed over s3fs's. s3fs is not an
AgentWorld dependency (it pins an older botocore than moto's), so run this
from a separate venv: ``python -m venv /tmp/s3cmp && /tmp/s3cmp/bin/pip
install s3fs obstore "moto[server]"`` (pip warns that moto's botocore is newer than
s3fs wants; this benchmark does not use botocore through s3fs's pin). The server is an emulator sharing these
CPUs: absolute figures are a floor, the ratio is the point.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _moto import start_s3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--objects", type=int, default=64)
    ap.add_argument("--kb", type=int, default=256)
    args = ap.parse_args()
    try:
        import obstore
        import s3fs
        from obstore.store import from_url
    except ImportError as exc:  # `make bench` runs every script: say why, and pass
        print(f"skipped: {exc.name} is not installed here (see this script's docstring)")
        return

    proc, endpoint = start_s3("obstore-b", "s3fs-b")
    blobs = [os.urandom(args.kb * 1024) for _ in range(args.objects)]
    store = from_url("s3://obstore-b/p")
    fs = s3fs.S3FileSystem(endpoint_url=endpoint, key="bench", secret="bench")

    def obstore_round(r: int) -> tuple[float, float, float]:
        with ThreadPoolExecutor(8) as ex:  # as remote_store.run_parallel does
            t0 = time.perf_counter()
            list(ex.map(lambda i: obstore.put(store, f"r{r}/{i}", blobs[i], mode="create"),
                        range(len(blobs))))  # fmt: skip
            t1 = time.perf_counter()
            keys = [m["path"] for c in obstore.list(store, prefix=f"r{r}/") for m in c]
            t2 = time.perf_counter()
            list(ex.map(lambda k: bytes(obstore.get(store, k).bytes()), keys))
            return t1 - t0, t2 - t1, time.perf_counter() - t2

    def s3fs_round(r: int) -> tuple[float, float, float]:
        t0 = time.perf_counter()
        fs.pipe({f"s3fs-b/p/r{r}/{i}": b for i, b in enumerate(blobs)})  # its async batch
        t1 = time.perf_counter()
        keys = fs.ls(f"s3fs-b/p/r{r}/", refresh=True)
        t2 = time.perf_counter()
        fs.cat(keys)
        return t1 - t0, t2 - t1, time.perf_counter() - t2

    try:
        runs: dict[str, list[tuple[float, float, float]]] = {"obstore": [], "s3fs": []}
        for r in range(3):  # side by side, round by round
            runs["obstore"].append(obstore_round(r))
            runs["s3fs"].append(s3fs_round(r))
        mb = len(blobs) * args.kb / 1024
        best = {k: [min(x[i] for x in v) for i in range(3)] for k, v in runs.items()}
        for name, (put, ls, get) in best.items():
            print(
                f"{name:8} put {mb / put:6.1f} MB/s  list {ls * 1e3:6.1f} ms  get {mb / get:6.1f} MB/s"
            )
        o, f = best["obstore"], best["s3fs"]
        print(
            f"obstore / s3fs speed: put {f[0] / o[0]:.2f}x  list {f[1] / o[1]:.2f}x  get {f[2] / o[2]:.2f}x"
        )
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
