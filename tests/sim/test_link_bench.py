"""The UART bench of ``hwgen verify --link`` (sim/link.py) on a loopback line: every byte the
host sends comes back, segments wait for their replies, a framing error and a timeout are
reported."""
from __future__ import annotations

import numpy as np
import pytest

from hwgen.sim.link import run_link

pytestmark = pytest.mark.verilator

# the design's line repeats the host's one cycle later
LOOP = """module loop(input clk_in, input uart_rx, output uart_tx);
  reg q = 1'b1;
  always @(posedge clk_in) q <= uart_rx;
  assign uart_tx = q;
endmodule
"""

# holds its line low: a start bit that never ends (a framing error at the stop bit)
LOW = """module low(input clk_in, input uart_rx, output uart_tx);
  reg q = 1'b1;
  always @(posedge clk_in) q <= q & uart_rx;
  assign uart_tx = q;
endmodule
"""


@pytest.mark.parametrize("divisor", [2, 5, 16])
def test_loopback_bytes_and_waits(divisor):
    rng = np.random.default_rng(divisor)
    a, b = bytes(rng.integers(0, 256, 37, dtype=np.uint8)), bytes(range(256))
    r = run_link(LOOP, "loop", [(a, 0), (b, len(a))], len(a) + len(b), divisor, 10**6)
    assert r.status == "ok"
    assert r.reply == a + b
    # one byte every ten bit times while the host sends back to back
    assert np.array_equal(np.diff(r.times[:len(a)]), np.full(len(a) - 1, 10 * divisor))
    assert r.times[len(a)] - r.times[len(a) - 1] >= 10 * divisor


def test_timeout_and_framing_error():
    # the second segment waits for a 4th reply byte that only it would bring: never sent
    r = run_link(LOOP, "loop", [(b"abc", 0), (b"d", 4)], 4, 4, 10**5)
    assert r.status == "timeout" and r.reply == b"abc"
    r = run_link(LOOP, "loop", [(b"abc", 0), (b"d", 3)], 4, 4, 10**5)
    assert r.status == "ok" and r.reply == b"abcd"
    r = run_link(LOW, "low", [(b"\x00", 0)], 1, 4, 10**4)
    assert r.status.startswith("framing error")
