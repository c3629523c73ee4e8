"""An ONNX model through xylem's importer: a small PyTorch CNN exported to ONNX, imported, run on
every available backend and compared with PyTorch, then fine-tuned with fit.

    .venv/bin/python examples/python/onnx_model.py [MODEL.onnx]
(without an argument the script exports its own model with Debian's torch)
"""
import sys
import tempfile

import numpy as np

import xylem

if len(sys.argv) > 1:
    path, reference = sys.argv[1], None
else:
    import torch
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                              torch.nn.Flatten(), torch.nn.Linear(8 * 14 * 14, 10)).eval()
    path = tempfile.mkdtemp() + "/cnn.onnx"
    torch.onnx.export(net, torch.zeros(1, 1, 28, 28), path, opset_version=17, input_names=["input"],
                      output_names=["output"], dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    reference = net

x = np.random.default_rng(0).random((16, 1, 28, 28), dtype=np.float32)
for b in xylem.backends():
    if not b["available"]:
        continue
    model = xylem.Model.from_onnx(path, backend=b["name"])
    out = model.predict(x)
    line = f"{b['name']}: output {out.shape}"
    if reference is not None:
        import torch
        with torch.no_grad():
            ref = reference(torch.from_numpy(x)).numpy()
        line += f", largest difference from PyTorch {np.abs(out - ref).max():.2e}"
    print(line)

# An imported model trains like any other (its config has the importer's defaults: cross-entropy, SGD).
model = xylem.Model.from_onnx(path, backend="native")
y = (x.mean(axis=(1, 2, 3)) * 1000).astype(np.int32) % 10
print("fit:", model.fit(x, y, epochs=3, batch_size=8, verbose=0)["loss"])
