"""Float models written the way third-party tools write them, quantized with onnxruntime
through ``hwgen quantize`` (QDQ).

Writes, into this folder, for every model ``NAME``: ``NAME.onnx`` (the float model),
``NAME_qdq.onnx`` (``hwgen quantize NAME.onnx --calibration CAL.npz -o NAME_qdq.onnx``; the
calibration set is 200 training samples in a temporary file) and ``NAME_test.npz`` (64
held-out samples under the ONNX input's name, batch axis first). ``FLOAT_MODELS.md`` lists
the models.

* ``field_keras_*`` and ``field_flatten_axis0``: no TensorFlow here, so the graphs are written
  with ``onnx.helper`` in tf2onnx's layout (channels-last input ``input_1`` with a batch dim
  named ``unk__N``, ``Transpose`` in and out of the NCHW convs, ``Reshape`` to a constant
  ``[-1, K]``, ``MatMul`` + ``Add`` for Dense, ``Softmax`` axis -1, opset 13, producer
  tf2onnx). The weights come from a PyTorch module that computes the same function, trained
  for a few seconds (digits; a synthetic 4-channel signal set for the Conv1D model).
* ``field_torch_*``: PyTorch modules trained on digits and exported twice:
  ``torch.onnx.export(dynamo=False, dynamic_axes={'x': {0: 'N'}})`` → ``*_ts.onnx`` and
  ``torch.onnx.export(dynamo=True, dynamic_shapes=({0: Dim('N')},))`` → ``*_dynamo.onnx``.

Then each float and QDQ model is run by onnxruntime on its test set, and ``hwgen inspect``'s
first problem line of each QDQ model is printed.

    python examples/field/make_float_models.py            # all models
    python examples/field/make_float_models.py --check    # only the checks on existing files
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper
from sklearn.datasets import load_digits
from torch import nn

HERE = Path(__file__).resolve().parent
N_TEST, N_CAL = 64, 200
TF2ONNX = ("tf2onnx", "1.16.1 15c810")


# ----------------------------------------------------------------------------- data
def digits():
    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(x))
    return x[idx], y[idx]


def signals(n=1200, seed=1):
    """[n, 32, 4] channels-last sequences, 5 classes: a class-dependent frequency and phase
    per channel, random amplitude, noise."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 5, n)
    t = np.arange(32)[None, :, None]
    freq = (0.15 + 0.12 * y)[:, None, None] * (1 + 0.3 * np.arange(4))[None, None, :]
    phase = (y[:, None, None] * 0.7 + np.arange(4)[None, None, :] * 0.5)
    amp = rng.uniform(0.5, 1.5, (n, 1, 4))
    x = amp * np.sin(freq * t + phase) + 0.3 * rng.standard_normal((n, 32, 4))
    return x.astype(np.float32), y.astype(np.int64)


def train(model: nn.Module, x: np.ndarray, y: np.ndarray, steps=600, lr=1e-2, log_probs=False):
    torch.manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    g = torch.Generator().manual_seed(0)
    model.train()
    for _ in range(steps):
        i = torch.randint(0, len(xt), (64,), generator=g)
        out = model(xt[i])
        loss = F.nll_loss(out, yt[i]) if log_probs else F.cross_entropy(out, yt[i])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    return model


def acc(logits, y):
    return float((np.argmax(logits, 1) == y).mean())


# ----------------------------------------------------------------------------- tf2onnx style
def t(a):
    return np.ascontiguousarray(a.detach().numpy() if isinstance(a, torch.Tensor) else a,
                                dtype=np.float32)


def tf_model(name, nodes, inits, inp, out, batch="unk__17", opset=13, producer=TF2ONNX):
    """A tf2onnx-like ModelProto: IR 8, ai.onnx opset 13, producer tf2onnx."""
    in_name, in_shape = inp
    out_name, out_shape = out
    def vi(n, shape):
        return helper.make_tensor_value_info(
            n, TensorProto.FLOAT, [batch if d is None else d for d in shape])
    g = helper.make_graph(nodes, "tf2onnx" if producer == TF2ONNX else name,
                          [vi(in_name, in_shape)], [vi(out_name, out_shape)],
                          initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)],
                          producer_name=producer[0], producer_version=producer[1])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


class KerasCNN(nn.Module):
    """Keras: Conv2D(8, 3, valid) ReLU, MaxPool2D(2), Conv2D(16, 3, same) ReLU, Flatten,
    Dense(32) ReLU, Dense(10) softmax -- on NHWC input."""
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 8, 3)
        self.c2 = nn.Conv2d(8, 16, 3, padding=1)
        self.d1 = nn.Linear(144, 32)
        self.d2 = nn.Linear(32, 10)

    def forward(self, x):                       # x: [N, 8, 8, 1]
        x = x.permute(0, 3, 1, 2)
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.relu(self.c2(x)).permute(0, 2, 3, 1).reshape(x.shape[0], -1)
        return self.d2(F.relu(self.d1(x)))


def make_keras_cnn(xd, yd):
    x = xd.reshape(-1, 8, 8, 1)
    m = train(KerasCNN(), x[N_TEST:], yd[N_TEST:])
    p = "sequential"
    inits = {
        f"{p}/conv2d/Conv2D/ReadVariableOp:0": t(m.c1.weight),
        f"{p}/conv2d/BiasAdd/ReadVariableOp:0": t(m.c1.bias),
        f"{p}/conv2d_1/Conv2D/ReadVariableOp:0": t(m.c2.weight),
        f"{p}/conv2d_1/BiasAdd/ReadVariableOp:0": t(m.c2.bias),
        "const_fold_opt__21": np.array([-1, 144], np.int64),
        f"{p}/dense/MatMul/ReadVariableOp:0": t(m.d1.weight.T),
        f"{p}/dense/BiasAdd/ReadVariableOp:0": t(m.d1.bias),
        f"{p}/dense_1/MatMul/ReadVariableOp:0": t(m.d2.weight.T),
        f"{p}/dense_1/BiasAdd/ReadVariableOp:0": t(m.d2.bias),
    }
    N = helper.make_node
    nodes = [
        N("Transpose", ["input_1"], [f"{p}/conv2d/BiasAdd__6:0"], name=f"{p}/conv2d/BiasAdd__6",
          perm=[0, 3, 1, 2]),
        N("Conv", [f"{p}/conv2d/BiasAdd__6:0", f"{p}/conv2d/Conv2D/ReadVariableOp:0",
                   f"{p}/conv2d/BiasAdd/ReadVariableOp:0"], [f"{p}/conv2d/BiasAdd:0"],
          name=f"{p}/conv2d/BiasAdd", auto_pad="VALID", dilations=[1, 1], kernel_shape=[3, 3],
          strides=[1, 1]),
        N("Relu", [f"{p}/conv2d/BiasAdd:0"], [f"{p}/conv2d/Relu:0"], name=f"{p}/conv2d/Relu"),
        N("MaxPool", [f"{p}/conv2d/Relu:0"], [f"{p}/max_pooling2d/MaxPool:0"],
          name=f"{p}/max_pooling2d/MaxPool", auto_pad="VALID", kernel_shape=[2, 2],
          strides=[2, 2]),
        N("Conv", [f"{p}/max_pooling2d/MaxPool:0", f"{p}/conv2d_1/Conv2D/ReadVariableOp:0",
                   f"{p}/conv2d_1/BiasAdd/ReadVariableOp:0"], [f"{p}/conv2d_1/BiasAdd:0"],
          name=f"{p}/conv2d_1/BiasAdd", dilations=[1, 1], kernel_shape=[3, 3],
          pads=[1, 1, 1, 1], strides=[1, 1]),
        N("Relu", [f"{p}/conv2d_1/BiasAdd:0"], [f"{p}/conv2d_1/Relu:0"],
          name=f"{p}/conv2d_1/Relu"),
        N("Transpose", [f"{p}/conv2d_1/Relu:0"], [f"{p}/conv2d_1/Relu__14:0"],
          name=f"{p}/conv2d_1/Relu__14", perm=[0, 2, 3, 1]),
        N("Reshape", [f"{p}/conv2d_1/Relu__14:0", "const_fold_opt__21"],
          [f"{p}/flatten/Reshape:0"], name=f"{p}/flatten/Reshape"),
        N("MatMul", [f"{p}/flatten/Reshape:0", f"{p}/dense/MatMul/ReadVariableOp:0"],
          [f"{p}/dense/MatMul:0"], name=f"{p}/dense/MatMul"),
        N("Add", [f"{p}/dense/MatMul:0", f"{p}/dense/BiasAdd/ReadVariableOp:0"],
          [f"{p}/dense/BiasAdd:0"], name=f"{p}/dense/BiasAdd"),
        N("Relu", [f"{p}/dense/BiasAdd:0"], [f"{p}/dense/Relu:0"], name=f"{p}/dense/Relu"),
        N("MatMul", [f"{p}/dense/Relu:0", f"{p}/dense_1/MatMul/ReadVariableOp:0"],
          [f"{p}/dense_1/MatMul:0"], name=f"{p}/dense_1/MatMul"),
        N("Add", [f"{p}/dense_1/MatMul:0", f"{p}/dense_1/BiasAdd/ReadVariableOp:0"],
          [f"{p}/dense_1/BiasAdd:0"], name=f"{p}/dense_1/BiasAdd"),
        N("Softmax", [f"{p}/dense_1/BiasAdd:0"], ["dense_1"], name=f"{p}/dense_1/Softmax",
          axis=-1),
    ]
    model = tf_model("field_keras_cnn", nodes, inits, ("input_1", [None, 8, 8, 1]),
                     ("dense_1", [None, 10]))
    return model, x, yd


def downsample16(xd):
    """Digits 8x8 → 4x4 (2x2 means): 16 features."""
    return xd.reshape(-1, 4, 2, 4, 2).mean((2, 4)).reshape(-1, 16).astype(np.float32)


class KerasDenseBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.d1 = nn.Linear(16, 32)
        self.bn = nn.BatchNorm1d(32, eps=1e-3, momentum=0.01)
        self.d2 = nn.Linear(32, 10)

    def forward(self, x):
        return self.d2(F.relu(self.bn(self.d1(x))))


def make_keras_dense_bn(xd, yd, muladd=False):
    x = downsample16(xd)
    torch.manual_seed(1)
    m = train(KerasDenseBN(), x[N_TEST:], yd[N_TEST:], steps=800)
    with torch.no_grad():   # make the BN statistics non-trivial (Keras' running averages)
        h = m.d1(torch.from_numpy(x[N_TEST:]))
        m.bn.running_mean.copy_(h.mean(0))
        m.bn.running_var.copy_(h.var(0))
    p = "sequential"
    N = helper.make_node
    inits = {
        f"{p}/dense/MatMul/ReadVariableOp:0": t(m.d1.weight.T),
        f"{p}/dense/BiasAdd/ReadVariableOp:0": t(m.d1.bias),
        f"{p}/dense_1/MatMul/ReadVariableOp:0": t(m.d2.weight.T),
        f"{p}/dense_1/BiasAdd/ReadVariableOp:0": t(m.d2.bias),
    }
    bn = f"{p}/batch_normalization"
    gamma, beta = t(m.bn.weight), t(m.bn.bias)
    mean, var = t(m.bn.running_mean), t(m.bn.running_var)
    if muladd:
        # tf2onnx of Keras BN on a 2-D tensor: TF's batchnorm/mul_1 and batchnorm/add_1 with the
        # constant folded: x * (gamma * rsqrt(var + eps)) + (beta - mean * that)
        scale = (gamma / np.sqrt(var + 1e-3)).astype(np.float32)
        inits[f"{bn}/batchnorm/mul"] = scale
        inits[f"{bn}/batchnorm/sub"] = (beta - mean * scale).astype(np.float32)
        bn_nodes = [
            N("Mul", [f"{p}/dense/BiasAdd:0", f"{bn}/batchnorm/mul"], [f"{bn}/batchnorm/mul_1:0"],
              name=f"{bn}/batchnorm/mul_1"),
            N("Add", [f"{bn}/batchnorm/mul_1:0", f"{bn}/batchnorm/sub"],
              [f"{bn}/batchnorm/add_1:0"], name=f"{bn}/batchnorm/add_1"),
        ]
    else:
        # keras2onnx / tf2onnx's BatchNormalization on a rank-2 input: to [N, C, 1] and back
        inits.update({f"{bn}/gamma:0": gamma, f"{bn}/beta:0": beta,
                      f"{bn}/moving_mean:0": mean, f"{bn}/moving_variance:0": var,
                      "const_axes__9": np.array([2], np.int64)})
        bn_nodes = [
            N("Unsqueeze", [f"{p}/dense/BiasAdd:0", "const_axes__9"], [f"{bn}/Unsqueeze__8:0"],
              name=f"{bn}/Unsqueeze__8"),
            N("BatchNormalization", [f"{bn}/Unsqueeze__8:0", f"{bn}/gamma:0", f"{bn}/beta:0",
                                     f"{bn}/moving_mean:0", f"{bn}/moving_variance:0"],
              [f"{bn}/BatchNorm:0"], name=f"{bn}/BatchNorm", epsilon=1e-3),
            N("Squeeze", [f"{bn}/BatchNorm:0", "const_axes__9"], [f"{bn}/batchnorm/add_1:0"],
              name=f"{bn}/Squeeze__10"),
        ]
    nodes = [
        N("MatMul", ["input_1", f"{p}/dense/MatMul/ReadVariableOp:0"], [f"{p}/dense/MatMul:0"],
          name=f"{p}/dense/MatMul"),
        N("Add", [f"{p}/dense/MatMul:0", f"{p}/dense/BiasAdd/ReadVariableOp:0"],
          [f"{p}/dense/BiasAdd:0"], name=f"{p}/dense/BiasAdd"),
        *bn_nodes,
        N("Relu", [f"{bn}/batchnorm/add_1:0"], [f"{p}/re_lu/Relu:0"], name=f"{p}/re_lu/Relu"),
        N("MatMul", [f"{p}/re_lu/Relu:0", f"{p}/dense_1/MatMul/ReadVariableOp:0"],
          [f"{p}/dense_1/MatMul:0"], name=f"{p}/dense_1/MatMul"),
        N("Add", [f"{p}/dense_1/MatMul:0", f"{p}/dense_1/BiasAdd/ReadVariableOp:0"],
          [f"{p}/dense_1/BiasAdd:0"], name=f"{p}/dense_1/BiasAdd"),
        N("Softmax", [f"{p}/dense_1/BiasAdd:0"], ["dense_1"], name=f"{p}/dense_1/Softmax",
          axis=-1),
    ]
    name = "field_keras_dense_muladd" if muladd else "field_keras_dense_bn"
    model = tf_model(name, nodes, inits, ("input_1", [None, 16]), ("dense_1", [None, 10]),
                     batch="unk__12")
    return model, x, yd


class KerasConv1D(nn.Module):
    """Conv1D(8, 3, valid), BatchNormalization, ReLU, Flatten, Dense(5) softmax on [N, 32, 4]."""
    def __init__(self):
        super().__init__()
        self.c = nn.Conv1d(4, 8, 3)
        self.bn = nn.BatchNorm1d(8, eps=1e-3)
        self.d = nn.Linear(240, 5)

    def forward(self, x):
        x = F.relu(self.bn(self.c(x.permute(0, 2, 1)))).permute(0, 2, 1)
        return self.d(x.reshape(x.shape[0], -1))


def make_keras_conv1d():
    x, y = signals()
    torch.manual_seed(2)
    m = train(KerasConv1D(), x[N_TEST:], y[N_TEST:], steps=600)
    p = "sequential"
    N = helper.make_node
    inits = {
        f"{p}/conv1d/Conv1D/ExpandDims_1:0": t(m.c.weight),
        f"{p}/conv1d/BiasAdd/ReadVariableOp:0": t(m.c.bias),
        f"{p}/batch_normalization/ReadVariableOp:0": t(m.bn.weight),
        f"{p}/batch_normalization/ReadVariableOp_1:0": t(m.bn.bias),
        f"{p}/batch_normalization/moving_mean:0": t(m.bn.running_mean),
        f"{p}/batch_normalization/moving_variance:0": t(m.bn.running_var),
        f"{p}/dense/MatMul/ReadVariableOp:0": t(m.d.weight.T),
        f"{p}/dense/BiasAdd/ReadVariableOp:0": t(m.d.bias),
    }
    nodes = [
        N("Transpose", ["input_1"], [f"{p}/conv1d/Conv1D__5:0"], name=f"{p}/conv1d/Conv1D__5",
          perm=[0, 2, 1]),
        N("Conv", [f"{p}/conv1d/Conv1D__5:0", f"{p}/conv1d/Conv1D/ExpandDims_1:0",
                   f"{p}/conv1d/BiasAdd/ReadVariableOp:0"], [f"{p}/conv1d/BiasAdd:0"],
          name=f"{p}/conv1d/Conv1D", auto_pad="VALID", dilations=[1], kernel_shape=[3],
          strides=[1]),
        N("BatchNormalization", [f"{p}/conv1d/BiasAdd:0",
                                 f"{p}/batch_normalization/ReadVariableOp:0",
                                 f"{p}/batch_normalization/ReadVariableOp_1:0",
                                 f"{p}/batch_normalization/moving_mean:0",
                                 f"{p}/batch_normalization/moving_variance:0"],
          [f"{p}/batch_normalization/FusedBatchNormV3:0"],
          name=f"{p}/batch_normalization/FusedBatchNormV3", epsilon=1e-3),
        N("Relu", [f"{p}/batch_normalization/FusedBatchNormV3:0"], [f"{p}/re_lu/Relu:0"],
          name=f"{p}/re_lu/Relu"),
        N("Transpose", [f"{p}/re_lu/Relu:0"], [f"{p}/re_lu/Relu__12:0"],
          name=f"{p}/re_lu/Relu__12", perm=[0, 2, 1]),
        N("Flatten", [f"{p}/re_lu/Relu__12:0"], [f"{p}/flatten/Reshape:0"],
          name=f"{p}/flatten/Reshape", axis=1),
        N("MatMul", [f"{p}/flatten/Reshape:0", f"{p}/dense/MatMul/ReadVariableOp:0"],
          [f"{p}/dense/MatMul:0"], name=f"{p}/dense/MatMul"),
        N("Add", [f"{p}/dense/MatMul:0", f"{p}/dense/BiasAdd/ReadVariableOp:0"],
          [f"{p}/dense/BiasAdd:0"], name=f"{p}/dense/BiasAdd"),
        N("Softmax", [f"{p}/dense/BiasAdd:0"], ["dense"], name=f"{p}/dense/Softmax", axis=-1),
    ]
    model = tf_model("field_keras_conv1d", nodes, inits, ("input_1", [None, 32, 4]),
                     ("dense", [None, 5]), batch="unk__20")
    return model, x, y


class SmallFlat(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(1, 4, 3, padding=1)
        self.d = nn.Linear(64, 10)

    def forward(self, x):
        return self.d(F.max_pool2d(F.relu(self.c(x)), 2).reshape(x.shape[0], -1))


class KerasConcatUp(nn.Module):
    """Keras functional: a = Conv2D(4, 3, same) ReLU; b = Conv2D(4, 3, stride 2, same) ReLU →
    UpSampling2D(2); Concatenate(axis=-1)([a, b]) → Conv2D(8, 3, valid) ReLU → MaxPool2D(2) →
    Flatten → Dense(10) softmax -- on NHWC input."""
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(1, 4, 3, padding=1)
        self.b = nn.Conv2d(1, 4, 3, stride=2, padding=1)
        self.c = nn.Conv2d(8, 8, 3)
        self.d = nn.Linear(72, 10)

    def forward(self, x):                       # x: [N, 8, 8, 1]
        x = x.permute(0, 3, 1, 2)
        a = F.relu(self.a(x))
        b = F.interpolate(F.relu(self.b(x)), scale_factor=2, mode="nearest")
        y = F.max_pool2d(F.relu(self.c(torch.cat([a, b], 1))), 2)
        return self.d(y.permute(0, 2, 3, 1).reshape(x.shape[0], -1))


def make_keras_concat_upsample(xd, yd):
    """tf2onnx without its transpose optimizer: every conv between NHWC ↔ NCHW transposes,
    the Concatenate along the last axis and the UpSampling2D as a Resize with NHWC scales."""
    x = xd.reshape(-1, 8, 8, 1)
    m = train(KerasConcatUp(), x[N_TEST:], yd[N_TEST:])
    p = "model"
    inits = {f"{p}/conv2d/kernel:0": t(m.a.weight), f"{p}/conv2d/bias:0": t(m.a.bias),
             f"{p}/conv2d_1/kernel:0": t(m.b.weight), f"{p}/conv2d_1/bias:0": t(m.b.bias),
             f"{p}/conv2d_2/kernel:0": t(m.c.weight), f"{p}/conv2d_2/bias:0": t(m.c.bias),
             f"{p}/up_sampling2d/scales:0": np.array([1, 2, 2, 1], np.float32),
             "const_fold_opt__30": np.array([-1, 72], np.int64),
             f"{p}/dense/MatMul/ReadVariableOp:0": t(m.d.weight.T),
             f"{p}/dense/BiasAdd/ReadVariableOp:0": t(m.d.bias)}
    N = helper.make_node

    def conv(name, src, **kw):
        return [N("Transpose", [src], [f"{p}/{name}/Conv2D__in:0"], name=f"{p}/{name}/Conv2D__in",
                  perm=[0, 3, 1, 2]),
                N("Conv", [f"{p}/{name}/Conv2D__in:0", f"{p}/{name}/kernel:0",
                           f"{p}/{name}/bias:0"], [f"{p}/{name}/BiasAdd:0"],
                  name=f"{p}/{name}/BiasAdd", dilations=[1, 1], kernel_shape=[3, 3], **kw),
                N("Relu", [f"{p}/{name}/BiasAdd:0"], [f"{p}/{name}/Relu:0"],
                  name=f"{p}/{name}/Relu")]

    def to_nhwc(src, dst):
        return N("Transpose", [src], [dst], name=dst.split(":")[0], perm=[0, 2, 3, 1])

    nodes = [
        *conv("conv2d", "input_1", pads=[1, 1, 1, 1], strides=[1, 1]),
        to_nhwc(f"{p}/conv2d/Relu:0", f"{p}/conv2d/Relu__7:0"),
        *conv("conv2d_1", "input_1", pads=[1, 1, 1, 1], strides=[2, 2]),
        to_nhwc(f"{p}/conv2d_1/Relu:0", f"{p}/conv2d_1/Relu__11:0"),
        N("Resize", [f"{p}/conv2d_1/Relu__11:0", "", f"{p}/up_sampling2d/scales:0"],
          [f"{p}/up_sampling2d/resize/ResizeNearestNeighbor:0"],
          name=f"{p}/up_sampling2d/resize/ResizeNearestNeighbor", mode="nearest",
          coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
        N("Concat", [f"{p}/conv2d/Relu__7:0",
                     f"{p}/up_sampling2d/resize/ResizeNearestNeighbor:0"],
          [f"{p}/concatenate/concat:0"], name=f"{p}/concatenate/concat", axis=-1),
        *conv("conv2d_2", f"{p}/concatenate/concat:0", pads=[0, 0, 0, 0], strides=[1, 1]),
        N("MaxPool", [f"{p}/conv2d_2/Relu:0"], [f"{p}/max_pooling2d/MaxPool:0"],
          name=f"{p}/max_pooling2d/MaxPool", kernel_shape=[2, 2], strides=[2, 2]),
        to_nhwc(f"{p}/max_pooling2d/MaxPool:0", f"{p}/max_pooling2d/MaxPool__24:0"),
        N("Reshape", [f"{p}/max_pooling2d/MaxPool__24:0", "const_fold_opt__30"],
          [f"{p}/flatten/Reshape:0"], name=f"{p}/flatten/Reshape"),
        N("MatMul", [f"{p}/flatten/Reshape:0", f"{p}/dense/MatMul/ReadVariableOp:0"],
          [f"{p}/dense/MatMul:0"], name=f"{p}/dense/MatMul"),
        N("Add", [f"{p}/dense/MatMul:0", f"{p}/dense/BiasAdd/ReadVariableOp:0"],
          [f"{p}/dense/BiasAdd:0"], name=f"{p}/dense/BiasAdd"),
        N("Softmax", [f"{p}/dense/BiasAdd:0"], ["dense"], name=f"{p}/dense/Softmax", axis=-1),
    ]
    model = tf_model("field_keras_concat_upsample", nodes, inits,
                     ("input_1", [None, 8, 8, 1]), ("dense", [None, 10]), batch="unk__31")
    return model, x, yd


def make_flatten_axis0(xd, yd):
    x = xd.reshape(-1, 1, 8, 8)
    torch.manual_seed(3)
    m = train(SmallFlat(), x[N_TEST:], yd[N_TEST:])
    N = helper.make_node
    inits = {"conv.weight": t(m.c.weight), "conv.bias": t(m.c.bias),
             "fc.weight_T": t(m.d.weight.T), "fc.bias": t(m.d.bias)}
    nodes = [
        N("Conv", ["input", "conv.weight", "conv.bias"], ["conv_out"], name="conv",
          kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]),
        N("Relu", ["conv_out"], ["relu_out"], name="relu"),
        N("MaxPool", ["relu_out"], ["pool_out"], name="pool", kernel_shape=[2, 2],
          strides=[2, 2]),
        N("Flatten", ["pool_out"], ["flat_out"], name="flatten", axis=0),
        N("MatMul", ["flat_out", "fc.weight_T"], ["fc_mm"], name="fc_matmul"),
        N("Add", ["fc_mm", "fc.bias"], ["output"], name="fc_add"),
    ]
    model = tf_model("field_flatten_axis0", nodes, inits, ("input", [1, 1, 8, 8]),
                     ("output", [1, 10]), producer=("field-exporter", "0"))
    return model, x, yd


# ----------------------------------------------------------------------------- PyTorch
class TorchMean(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 16, 3, padding=1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        return self.fc(F.relu(self.c2(F.relu(self.c1(x)))).mean((2, 3)))


class TorchFlatten(nn.Module):
    def __init__(self, head="softmax"):
        super().__init__()
        self.head = head
        self.c1 = nn.Conv2d(1, 8, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(128, 10)

    def forward(self, x):
        z = self.fc(torch.flatten(self.pool(F.relu(self.c1(x))), 1))
        if self.training:
            return F.log_softmax(z, dim=1)
        return F.softmax(z, dim=1) if self.head == "softmax" else F.log_softmax(z, dim=1)


def export_torch(name, m, x):
    m.eval()
    xt = torch.from_numpy(x[:2])
    out = {}
    p = HERE / f"field_torch_{name}_ts.onnx"
    torch.onnx.export(m, (xt,), str(p), dynamo=False, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "N"}, "y": {0: "N"}})
    out[p.stem] = onnx.load(str(p))
    p = HERE / f"field_torch_{name}_dynamo.onnx"
    prog = torch.onnx.export(m, (xt,), dynamo=True, input_names=["x"], output_names=["y"],
                             dynamic_shapes=({0: torch.export.Dim("N")},))
    prog.save(str(p))
    out[p.stem] = onnx.load(str(p))
    return out


# ----------------------------------------------------------------------------- checks
def inspect_first_problem(path: Path) -> str:
    """The line after ``problems (n):`` (or ``problems: none ...``) of ``hwgen inspect``."""
    r = subprocess.run(["hwgen", "inspect", str(path)], capture_output=True, text=True)
    lines = (r.stdout + r.stderr).splitlines()
    for i, ln in enumerate(lines):
        if ln.startswith("problems"):
            if ln.startswith("problems ("):
                return f"{ln.strip()} {lines[i + 1].strip()}"
            return ln.strip()
    return f"rc={r.returncode}: " + next((ln for ln in reversed(lines) if ln.strip()), "")


def run_ort(path: Path, x: np.ndarray) -> np.ndarray:
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    i = s.get_inputs()[0]
    if isinstance(i.shape[0], int) and i.shape[0] == 1:   # fixed batch 1: one at a time
        return np.concatenate([s.run(None, {i.name: x[k:k + 1]})[0] for k in range(len(x))])
    return s.run(None, {i.name: x})[0]


def quantize(path: Path, cal: np.ndarray, in_name: str) -> str:
    q = path.with_name(path.stem + "_qdq.onnx")
    with tempfile.TemporaryDirectory() as d:
        c = Path(d) / "cal.npz"
        np.savez(c, **{in_name: cal})
        r = subprocess.run(["hwgen", "quantize", str(path), "--calibration", str(c), "-o",
                            str(q)], capture_output=True, text=True)
    if r.returncode:
        return "FAILED: " + (r.stdout + r.stderr).strip().splitlines()[-1]
    return "ok"


def check(name: str, y: np.ndarray | None = None):
    f = HERE / f"{name}.onnx"
    q = HERE / f"{name}_qdq.onnx"
    m = onnx.load(str(f))
    x = np.load(HERE / f"{name}_test.npz")[m.graph.input[0].name]
    def dims(v):
        return [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
    print(f"{name}: opset {m.opset_import[0].version}, input {m.graph.input[0].name} "
          f"{dims(m.graph.input[0])}, output {m.graph.output[0].name} {dims(m.graph.output[0])}"
          f", ops {sorted({n.op_type for n in m.graph.node})}")
    yf = run_ort(f, x)
    line = f"  float: ok {yf.shape}"
    if y is not None:
        line += f" acc {acc(yf, y):.2f}"
    if q.exists():
        yq = run_ort(q, x)
        line += f"; qdq: ok, argmax agreement {float((yq.argmax(1) == yf.argmax(1)).mean()):.2f}"
        line += f", max |diff| {np.abs(yq - yf).max():.3g}"
        print(line)
        print(f"  inspect: {inspect_first_problem(q)}")
    else:
        print(line + "; qdq: missing")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true", help="only check the existing files")
    ap.add_argument("--only", help="comma-separated model names to (re)make")
    args = ap.parse_args()
    torch.set_num_threads(1)
    xd, yd = digits()
    names = ["field_keras_cnn", "field_keras_dense_bn", "field_keras_dense_muladd",
             "field_keras_conv1d", "field_flatten_axis0", "field_keras_concat_upsample"]
    torch_names = ["mean", "flatten_softmax", "flatten_logsoftmax"]
    labels = {}
    only = set(args.only.split(",")) if args.only else None
    if not args.check:
        quant = {}
        builders = [lambda: make_keras_cnn(xd, yd), lambda: make_keras_dense_bn(xd, yd),
                    lambda: make_keras_dense_bn(xd, yd, muladd=True), make_keras_conv1d,
                    lambda: make_flatten_axis0(xd, yd),
                    lambda: make_keras_concat_upsample(xd, yd)]
        for name, build in zip(names, builders):
            if only is not None and name not in only:
                continue
            model, x, y = build()
            onnx.save(model, str(HERE / f"{name}.onnx"))
            iname = model.graph.input[0].name
            np.savez_compressed(HERE / f"{name}_test.npz", **{iname: x[:N_TEST]})
            quant[name] = quantize(HERE / f"{name}.onnx", x[N_TEST:N_TEST + N_CAL], iname)
            labels[name] = y[:N_TEST]
        ximg = xd.reshape(-1, 1, 8, 8)
        for tn, mod, lp in [("mean", TorchMean(), False),
                            ("flatten_softmax", TorchFlatten("softmax"), True),
                            ("flatten_logsoftmax", TorchFlatten("logsoftmax"), True)]:
            if only is not None and f"field_torch_{tn}" not in only:
                continue
            torch.manual_seed(4)
            train(mod, ximg[N_TEST:], yd[N_TEST:], log_probs=lp)
            for stem in export_torch(tn, mod, ximg):
                np.savez_compressed(HERE / f"{stem}_test.npz", x=ximg[:N_TEST])
                quant[stem] = quantize(HERE / f"{stem}.onnx", ximg[N_TEST:N_TEST + N_CAL], "x")
                labels[stem] = yd[:N_TEST]
        for k, v in quant.items():
            print(f"hwgen quantize {k}: {v}")
    else:
        labels = {n: yd[:N_TEST] for n in names if n != "field_keras_conv1d"}
        labels["field_keras_conv1d"] = signals()[1][:N_TEST]
    for name in names + [f"field_torch_{t}_{e}" for t in torch_names for e in ("ts", "dynamo")]:
        if only is not None and not any(name.startswith(o) for o in only):
            continue
        if name.startswith("field_torch"):
            labels.setdefault(name, yd[:N_TEST])
        check(name, labels.get(name))


if __name__ == "__main__":
    sys.exit(main())
