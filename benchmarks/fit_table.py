"""How every example design sits on its board at the device-aware folding.

    python benchmarks/fit_table.py [--layers] [--budget 0.85] [--dsp-only | --logic-lanes]

Per design and board: the interval (cycles per frame of the bottleneck), the device bound
(the model's multiply–accumulates ÷ the device's multiplier lanes), their ratio, the MAC
utilisation (busy dot-product multiplier-cycles ÷ (those multipliers × the interval)), the
estimated use of each resource kind against the budget's limit, and the folding (PE/SIMD of
every multiplying layer, in order, ``s`` marking weights in SPRAM, ``r`` weights in logic
cells instead of block RAM, ``+LN``: N of its products
built of logic cells; ``--layers`` adds one line per layer with its utilisation). The bound
counts the DSP tiles' lanes only. As ``hwgen compile`` does by default, products go into
logic cells only for targets down to the bound (a layer folded to meet it may land below
it); ``--logic-lanes`` lets the search target shorter intervals, ``--dsp-only`` keeps every
product in a DSP tile. Models no pipeline folding fits go on the layer-sequential engine
(DS-CNN on the iCEBreaker). Nothing is simulated or synthesized: the figures are the
estimates ``hwgen inspect`` prints.
"""
from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

from hwgen.boards.fold import DEFAULT_BUDGET, fold_for_device, resolve_target
from hwgen.dataflow.importer import load_model, to_int_graph

EX = Path(__file__).resolve().parent.parent / "examples"
ULX = "ulx3s-85f"
ICE = "icebreaker"
#: (model, boards)
DESIGNS = [
    ("digits_mlp_qdq.onnx", (ULX,)),
    ("digits_cnn_qdq.onnx", (ULX,)),
    ("digits_resnet_qdq.onnx", (ULX,)),
    ("mlperf_tiny/resnet8_qdq.onnx", (ULX,)),
    ("mlperf_tiny/dscnn_qdq.onnx", (ULX, ICE)),
    ("mlperf_tiny/mobilenet_v1_025_qdq.onnx", (ULX,)),
    ("mlperf_tiny/autoencoder_qdq.onnx", (ULX,)),
    ("finn/tfc-w1a1.onnx", (ULX, ICE)),
    ("finn/tfc-w2a2.onnx", (ULX, ICE)),
    ("finn/cnv-w1a1.onnx", (ULX,)),
    ("finn/cnv-w2a2.onnx", (ULX,)),
]
SHORT = {"logic cells": "LC", "flip-flops": "FF", "DSP tiles": "DSP", "block RAM tiles": "BRAM",
         "SPRAM tiles": "SPRAM"}


def row(model: str, board: str, budget: float, layers: bool, lanes: str = "bound"
        ) -> list[str]:
    ig = to_int_graph(load_model(EX / model, upgrade=True))
    t0 = time.perf_counter()
    target = dataclasses.replace(resolve_target(board, budget=budget), logic_lanes=lanes)
    fold, _, rep = fold_for_device(ig, target, refuse=False)
    dt = time.perf_counter() - t0
    ratio = f"{rep.interval / rep.bound:.2f}x" if rep.bound else "-"
    util = rep.mac_utilisation
    use = " ".join(f"{SHORT[k]} {rep.use[k]:,}/{rep.limit[k]:,}" for k in rep.device.kinds)
    folds = " ".join(f"{fold[n].pe}/{fold[n].simd}{'s' if fold[n].spram else ''}"
                     + ("r" if fold[n].rom_logic else "")
                     + (f"+L{fold[n].lut_lanes}" if fold[n].lut_lanes else "")
                     for n in rep.layer_macs)
    lines = [f"{model:40} {board:10} {rep.interval:>9,} {rep.bound or 0:>8,} {ratio:>6} "
             f"{'-' if util is None else f'{100 * util:.0f} %':>5} "
             f"{'fits' if rep.fits else 'OVER':4} {use}  [{dt:.1f} s]",
             f"    folding: {folds}"]
    if layers:
        lines += [f"      {n[-44:]:44} {fold[n].pe:>4}/{fold[n].simd:<4} {100 * u:5.1f} %"
                  for n, u in rep.layer_utilisation().items()]
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", action="store_true", help="one line per multiplying layer")
    ap.add_argument("--budget", type=float, default=DEFAULT_BUDGET)
    ll = ap.add_mutually_exclusive_group()
    ll.add_argument("--dsp-only", dest="lanes", action="store_const", const="dsp",
                    default="bound", help="every product in a DSP tile")
    ll.add_argument("--logic-lanes", dest="lanes", action="store_const", const="all",
                    help="products in logic cells beyond the device's bound")
    args = ap.parse_args()
    print(f"{'design':40} {'board':10} {'interval':>9} {'bound':>8} {'ratio':>6} {'MAC':>5} "
          f"fit  use/limit")
    for model, boards in DESIGNS:
        for board in boards:
            print("\n".join(row(model, board, args.budget, args.layers, args.lanes)),
                  flush=True)


if __name__ == "__main__":
    main()
