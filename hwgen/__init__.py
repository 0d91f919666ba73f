"""hwgen: ONNX models → streaming dataflow accelerators, bit-exact against their golden model.

Python API::

    import hwgen
    res = hwgen.compile("model.onnx", "out/")            # Verilog + manifest.json
    sim = hwgen.simulate("out/", "inputs.npz")           # RTL simulation (Verilator)
    rep = hwgen.verify("model.onnx", "inputs.npz")       # RTL vs golden vs onnxruntime

The layers below the API (``hwgen.rtl_templates``, ``hwgen.dataflow``, ``hwgen.sim``,
``hwgen.boards``) are sub-packages of this one and import ``hwgen.errors``, so this root
module imports nothing else eagerly: the API functions are attributes loaded on first use
(PEP 562), which keeps ``import hwgen.rtl_templates`` free of the whole pipeline.
"""
import importlib
import os

__version__ = "0.1.0"

# Installed, the sub-packages live inside this folder (pyproject.toml's package-dir). In a
# source checkout they are its siblings: let ``hwgen.dataflow`` find ``../dataflow`` there, so
# that code run from the checkout (``python -m pytest``, ``PYTHONPATH=.``) sees one hwgen.
_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if os.path.isfile(os.path.join(_root, "rtl_templates", "block.py")) and \
        not os.path.isdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), "dataflow")):
    __path__.append(_root)  # noqa: F821 - the package's own search path

from hwgen.errors import HwgenError, HwgenWarning  # noqa: E402

_API = ("compile", "simulate", "verify")


def __getattr__(name: str):
    if name in _API:
        return getattr(importlib.import_module("hwgen.api"), name)
    raise AttributeError(f"module 'hwgen' has no attribute {name!r}")


__all__ = ["HwgenError", "HwgenWarning", "compile", "simulate", "verify", "__version__"]
