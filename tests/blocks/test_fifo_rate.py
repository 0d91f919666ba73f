"""The stream FIFO passes one beat per cycle at the depths lowering gives it. A FIFO of two
words passes one beat every other cycle (its inner queue of one word is ready only while
empty), which once halved the interval of a convolution feeding a global pool at full rate."""
from __future__ import annotations

import numpy as np
import pytest

from hwgen.dataflow.lower import FIFO_MARGIN
from hwgen.rtl_templates.fifo import FIFOParams, StreamFIFO
from hwgen.rtl_templates.quant import UINT8
from hwgen.sim.harness import run_block

BEATS = 48


def in_times(depth: int) -> list[int]:
    x = np.arange(BEATS, dtype=np.int64).reshape(1, BEATS) % 256
    run = run_block(StreamFIFO(FIFOParams(8, depth, BEATS)), x, UINT8, 1, UINT8, 1, BEATS)
    assert np.array_equal(run.frames, x)
    return run.result.in_times


@pytest.mark.parametrize("depth", sorted({FIFO_MARGIN, 3, 4, 10}))
def test_full_rate_at_lowering_depths(depth):
    t = in_times(depth)
    assert t == list(range(t[0], t[0] + BEATS)), f"depth {depth}: gaps in {t}"


def test_two_words_pass_every_other_cycle():
    """Why the margin is 3: the same FIFO with two words takes a beat every other cycle."""
    t = in_times(2)
    gaps = np.diff(t)
    assert (gaps == 2).sum() >= BEATS // 2 - 2, t


@pytest.mark.verilator
def test_window_fifo_keeps_a_slow_unit_busy(tmp_path):
    """A 3-channel convolution read through the window-parallel generator by a matrix unit
    slower than the generator's walk: without a FIFO between them the unit waited out the
    generator's walk over the next frame's first rows (interval 143 against an estimate of
    128); with the FIFO lowering now adds, the measured interval is the estimate."""
    from conftest import save_model
    from test_cnn_ops import Net, inputs, quantized

    import hwgen

    def build(seed):
        n = Net((3, 8, 8), seed)
        c = n.relu(n.conv("x", 8, 3, "conv", pads=[1, 1, 1, 1]), "relu")
        g = n.op("Flatten", [n.op("GlobalAveragePool", [c], "pool")], "flatten", axis=1)
        return n, n.gemm(g, 8, 4, "fc")

    _, qm, _ = quantized(build)
    model = save_model(qm, tmp_path / "m.onnx")
    x = inputs(12, (3, 8, 8), 5)
    rep = hwgen.verify(model, x, simulator="verilator", target_cycles=128,
                       out_dir=tmp_path / "d")
    assert rep.rtl_equals_golden
    est = rep.compiled.manifest["estimate"]["cycles_per_frame"]
    assert est == 128
    assert rep.sim.interval == est
