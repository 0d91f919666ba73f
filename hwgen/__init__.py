"""hwgen: ONNX models → streaming dataflow accelerators, bit-exact against their golden model.

Python API::

    import hwgen
    res = hwgen.compile("model.onnx", "out/")            # Verilog + manifest.json
    sim = hwgen.simulate("out/", "inputs.npz")           # RTL simulation (Verilator)
    rep = hwgen.verify("model.onnx", "inputs.npz")       # RTL vs golden vs onnxruntime
"""
__version__ = "0.1.0"

from hwgen.errors import HwgenError  # noqa: E402


def compile(*args, **kwargs):
    from hwgen.api import compile as _compile
    return _compile(*args, **kwargs)


def simulate(*args, **kwargs):
    from hwgen.api import simulate as _simulate
    return _simulate(*args, **kwargs)


def verify(*args, **kwargs):
    from hwgen.api import verify as _verify
    return _verify(*args, **kwargs)


__all__ = ["HwgenError", "compile", "simulate", "verify", "__version__"]
