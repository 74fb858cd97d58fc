#!/usr/bin/python3
"""gen_group_conv.py: writes models/conv_group.onnx (two Conv nodes: group 2 with bias,
strides 2 and asymmetric pads, then depthwise group = 4 with dilation 2, no bias) with
its input and the expected output computed by PyTorch CPU in float64 (rounded once to
float32): models/conv_group_x.npy, models/conv_group_y.npy. The libonnx-testdata node tests
of ONNX 1.12 have no Conv with group > 1; tests/onnx/group_conv.sh runs this model through
`tensorctl run` locally and remotely. Rerun with Debian's python3-onnx, python3-torch and
python3-numpy (/usr/bin/python3) and check the files in."""
import os

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models")
rng = np.random.default_rng(20261203)
x = rng.standard_normal((2, 4, 9, 8)).astype(np.float32)
w1 = (rng.standard_normal((6, 2, 3, 3)) * 0.3).astype(np.float32)  # group 2: C/G = 2, M = 6
b1 = rng.standard_normal(6).astype(np.float32)
w2 = (rng.standard_normal((6, 1, 2, 3)) * 0.3).astype(np.float32)  # depthwise: group 6
n1 = helper.make_node("Conv", ["x", "w1", "b1"], ["h"], group=2, strides=[2, 1],
                      pads=[1, 0, 2, 1], kernel_shape=[3, 3])
n2 = helper.make_node("Conv", ["h", "w2"], ["y"], group=6, dilations=[2, 1])
graph = helper.make_graph(
    [n1, n2], "conv_group",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6, 3, 5])],
    [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(b1, "b1"),
     numpy_helper.from_array(w2, "w2")])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
onnx.checker.check_model(model)
onnx.save(model, os.path.join(here, "conv_group.onnx"))

# reference: float64; ONNX pads [top, left, bottom, right] -> F.pad (left, right, top, bottom)
xd = torch.from_numpy(x).double()
h = F.conv2d(F.pad(xd, (0, 1, 1, 2)), torch.from_numpy(w1).double(),
             torch.from_numpy(b1).double(), stride=(2, 1), groups=2)
y = F.conv2d(h, torch.from_numpy(w2).double(), dilation=(2, 1), groups=6)
np.save(os.path.join(here, "conv_group_x.npy"), x)
np.save(os.path.join(here, "conv_group_y.npy"), y.numpy().astype(np.float32))
print("y", tuple(y.shape))
