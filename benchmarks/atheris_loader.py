"""Coverage-guided fuzzing of the ONNX loader and the import with atheris (libFuzzer).

    pip install atheris          # not a dependency of hwgen
    python benchmarks/atheris_loader.py -max_total_time=1200 -rss_limit_mb=4096 CORPUS/

The corpus starts from the example models (copied into CORPUS/ when it is empty). Each
input is written to a file and goes through ``dataflow.importer.load_model`` (upgrading as
``hwgen compile`` does), the import into the integer graph, and ``hwgen inspect``'s report:
anything but a :class:`HwgenError` (or a warning) is a finding, and libFuzzer saves the input
as ``crash-<hash>``.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

import atheris

ROOT = Path(__file__).resolve().parent.parent

with atheris.instrument_imports(include=["hwgen"]):
    from hwgen import inspect
    from hwgen.dataflow.importer import load_model, to_int_graph
    from hwgen.errors import HwgenError

WORK = Path(tempfile.mkdtemp(prefix="hwgen-atheris-"))
MODEL = WORK / "model.onnx"


def one(data: bytes):
    MODEL.write_bytes(data)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            graph = load_model(MODEL, upgrade=True)
        except HwgenError:
            return
        try:
            to_int_graph(graph)
        except HwgenError:
            pass
        try:
            inspect.inspect(MODEL)
        except HwgenError:
            pass


def main():
    corpus = [a for a in sys.argv[1:] if not a.startswith("-")]
    for c in corpus:
        d = Path(c)
        d.mkdir(parents=True, exist_ok=True)
        if not any(d.iterdir()):
            for m in sorted((ROOT / "examples").glob("digits_*.onnx")):
                shutil.copy(m, d / m.name)
    try:
        atheris.Setup(sys.argv, one)
        atheris.Fuzz()
    finally:
        shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
