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
