"""The software references a design is compared with: onnxruntime, run in batches."""
from __future__ import annotations

import numpy as np

from hwgen.errors import HwgenError


def run_batched(sess, in_name: str, out_name: str, x: np.ndarray) -> np.ndarray:
    """onnxruntime session ``sess`` on ``x``: the whole batch at once, or in chunks of the
    model's fixed batch size if it has one."""
    n = sess.get_inputs()[0].shape[0]
    if not isinstance(n, int) or n <= 0:
        return sess.run([out_name], {in_name: x})[0]
    if x.shape[0] % n:
        raise HwgenError(f"the model fixes its batch size to {n}; give a multiple of {n} "
                         f"samples (got {x.shape[0]})")
    return np.concatenate([sess.run([out_name], {in_name: x[k:k + n]})[0]
                           for k in range(0, x.shape[0], n)])
