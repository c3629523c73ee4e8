#!/usr/bin/env python3
"""`xylem export` against ONNX Runtime (tests/CMakeLists.txt: onnx.export_parity; docs/onnx-export.md).

For each example model (examples/fashion_mlp.toml, fashion_lenet.toml, fashion_resnet.toml,
fashion_vgg_small.toml, conv_mlp.toml, leaf_mlp.toml, char_rnn.toml, gpt_char.toml) and a few
variants written here (the char-rnn with a GRU, the GPT with the tanh GELU; "mix" and "mix_seq",
the layer types and forms the examples do not use), trains 2 steps from the random init (`xylem train
--max-steps 2`), exports it (`xylem export --input x.npy`, which also writes xylem's own output on
x on each backend asked for), runs the ONNX file in ONNX Runtime's CPU provider on the same x, and
requires max |xylem - ort| <= rtol * max |ort|. Then it re-imports the file (`xylem run`) on each
backend and requires the same of that output. The models in --reimport must import; for the
others an importer's error (exit 1 with its one line) is printed as not yet importable; a crash
fails the test.

Runs in a venv with onnxruntime (scripts/test.sh makes it). One line per model and backend; exit
status 1 on any disagreement.
"""
import argparse
import os
import re
import sys
import time

import numpy as np

from xylem_cli import rel_err, xylem  # beside this script

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(SOURCE, "examples")


def example(name):
    with open(os.path.join(EXAMPLES, name)) as f:
        return f.read()


def char_gru():
    """char_rnn.toml with a GRU (the same keys but lstm's forget_bias)."""
    text = example("char_rnn.toml").replace('type = "lstm"', 'type = "gru"')
    return re.sub(r"^forget_bias.*$", "", text, flags=re.M)


def gpt_tanh():
    """gpt_char.toml with GPT-2's tanh GELU, a smaller model (2 blocks) and no attention bias."""
    text = example("gpt_char.toml").replace('{ name = "gelu", type = "gelu" }',
                                            '{ name = "gelu", type = "gelu", approximate = "tanh" }')
    text = text.replace("heads = 4,", "heads = 2, bias = false,")
    return text.replace('type = "block", block = "block", count = 4', 'type = "block", block = "block", count = 2')


MIX = """
# The layer types the examples leave out, on Fashion-MNIST images: avgpool2d, concat, a grouped
# dilated conv2d, sigmoid, tanh, mul, sub, clamp, slice, transpose, dropout, reshape, batchnorm after a linear, softmax
# (check_export.py).
[data]
dir = "/usr/share/datasets/fashion-mnist"
[model]
layers = [
  { name = "conv", type = "conv2d", out = 4, kernel = 3, padding = 1, stride = 2 },
  { name = "avg", type = "avgpool2d", kernel = 3, stride = 2, padding = 1, count_include_pad = false },
  { name = "max", type = "maxpool2d", kernel = 3, stride = 2, padding = 1, inputs = ["conv"] },
  { name = "cat", type = "concat", inputs = ["avg", "max"] },
  { name = "gconv", type = "conv2d", out = 8, kernel = 3, padding = 2, dilation = 2, groups = 4 },
  { name = "sig", type = "sigmoid" },
  { name = "th", type = "tanh", inputs = ["gconv"] },
  { name = "sum", type = "add", inputs = ["sig", "th"] },
  { name = "gated", type = "mul", inputs = ["sum", "sig"] },
  { name = "diff", type = "sub", inputs = ["gated", "th"] },
  { name = "clip", type = "clamp", lo = -0.5, hi = 1.5 },
  { name = "crop", type = "slice", axis = 3, start = 1, end = -1 },
  { name = "swap", type = "transpose", perm = [2, 0, 1] },
  { name = "drop", type = "dropout", p = 0.3 },
  { name = "flat", type = "reshape", shape = [-1] },
  { name = "fc1", type = "linear", out = 32 },
  { name = "bn", type = "batchnorm" },
  { name = "fc2", type = "linear", out = 10 },
  { name = "prob", type = "softmax" },
]
[train]
batch_size = 8
"""

MIX_SEQ = """
# Sequence forms the examples leave out, on text: an embedding, position embedding shorter than its
# table, layer_norm without bias, non-causal attention without bias, concat on the last axis, add of
# a [C] vector to every step (slice + reshape), gelu, log_softmax (check_export.py).
[data]
text = ["/usr/share/games/fortunes"]
text_exclude = ["*.dat", "*.u8"]
seq_len = 16
[model]
layers = [
  { name = "wte", type = "embedding", dim = 16 },
  { name = "wpe", type = "position_embedding", max_len = 32 },
  { name = "ln", type = "layer_norm", bias = false, eps = 1e-3 },
  { name = "attn", type = "attention", heads = 4, causal = false, bias = false },
  { name = "fc", type = "linear", out = 16 },
  { name = "g", type = "gelu" },
  { name = "cat", type = "concat", axis = -1, inputs = ["wpe", "g"] },
  { name = "last", type = "slice", axis = 1, start = -1 },
  { name = "flat", type = "reshape", shape = [32] },
  { name = "plus", type = "add", inputs = ["cat", "flat"] },
  { name = "head", type = "linear", out = "vocab" },
  { name = "logp", type = "log_softmax" },
]
[train]
batch_size = 4
"""

# name: (config text or file, batch of the test input)
MODELS = {
    "mlp": (lambda: example("fashion_mlp.toml"), 4),
    "lenet": (lambda: example("fashion_lenet.toml"), 4),
    "resnet": (lambda: example("fashion_resnet.toml"), 2),
    "vgg": (lambda: example("fashion_vgg_small.toml"), 2),
    "conv_mlp": (lambda: example("conv_mlp.toml"), 4),
    "leaf_mlp": (lambda: example("leaf_mlp.toml"), 4),
    "mix": (lambda: MIX, 4),
    "mix_seq": (lambda: MIX_SEQ, 2),
    "char_rnn": (lambda: example("char_rnn.toml"), 2),
    "char_gru": (char_gru, 2),
    "gpt": (lambda: example("gpt_char.toml"), 2),
    "gpt_tanh": (gpt_tanh, 2),
}


def ort_session(path):
    import onnxruntime as ort
    return ort.InferenceSession(path, providers=["CPUExecutionProvider"])


def test_input(session, batch, seed):
    """Random input of the exported model's own declared shape: images in [0, 1), or token indices."""
    rng = np.random.default_rng(seed)
    inp = session.get_inputs()[0]
    shape = [batch] + [int(d) for d in inp.shape[1:]]
    if inp.type == "tensor(int64)":
        vocab = int(session.get_outputs()[0].shape[-1])
        return rng.integers(0, vocab, size=shape).astype(np.int64)
    return rng.random(shape, dtype=np.float32)


def check_model(args, name, backends):
    make, batch = MODELS[name]
    work = os.path.join(args.work, name)
    os.makedirs(work, exist_ok=True)
    config = os.path.join(work, name + ".toml")
    with open(config, "w") as f:
        f.write(make())
    # Two steps from the random init: every parameter and batch-norm statistic moves off its init.
    xylem(args, "train", "--config", config, "--max-steps", "2", "--batch-size", "4", "--out", os.path.join(work, "run"),
          "--backend", "native")
    checkpoint = os.path.join(work, "run", "model.safetensors")
    onnx_path = os.path.join(work, name + ".onnx")
    xylem(args, "export", "--config", config, "--checkpoint", checkpoint, "--out", onnx_path, "--backend", "native")
    session = ort_session(onnx_path)
    x = test_input(session, batch, args.seed)
    want = session.run(None, {session.get_inputs()[0].name: x})[0]
    x_path = os.path.join(work, "x.npy")
    np.save(x_path, x)  # float32 images, or int64 token ids as the model's input takes them
    failures = 0
    for backend in backends:
        # xylem's own model on x, through export's --input (the file it writes is the same model).
        out = os.path.join(work, f"{name}.{backend}.onnx")
        xylem(args, "export", "--config", config, "--checkpoint", checkpoint, "--out", out, "--input", x_path,
              "--backend", backend)
        got = np.load(out[:-len(".onnx")] + ".output.npy")
        err = rel_err(got, want) if got.shape == want.shape else float("inf")
        ok = err <= args.rtol
        failures += not ok
        print(f"{name:9s} {backend:7s} xylem vs ORT   {err:.2e} {'ok' if ok else 'FAIL'}  {list(want.shape)}", flush=True)
        # Re-import: the ONNX file through xylem's importer on this backend.
        r = xylem(args, "run", onnx_path, "--input", x_path, "--out", os.path.join(work, "run_" + backend),
                  "--backend", backend, check=False)
        if r.returncode != 0:
            message = (r.stderr or r.stdout).strip().splitlines()[-1] if (r.stderr or r.stdout).strip() else ""
            refused = r.returncode == 1 and message.startswith("xylem: error:")  # an error line, not a crash
            if name in args.reimport.split(",") or not refused:
                failures += 1
                print(f"{name:9s} {backend:7s} re-import      FAIL  {message}", flush=True)
            else:
                print(f"{name:9s} {backend:7s} re-import      not yet importable: {message}", flush=True)
            continue
        got = np.load(os.path.join(work, "run_" + backend, "output.npy"))
        err = rel_err(got, want) if got.shape == want.shape else float("inf")
        ok = err <= args.rtol
        failures += not ok
        print(f"{name:9s} {backend:7s} re-import      {err:.2e} {'ok' if ok else 'FAIL'}", flush=True)
    return failures


def check_refusals(args):
    """The command's refusals, on the MLP's run: nothing is written when --input does not fit; a
    missing --out is a usage error (exit 2)."""
    work = os.path.join(args.work, "mlp")
    config, checkpoint = os.path.join(work, "mlp.toml"), os.path.join(work, "run", "model.safetensors")
    bad_x, out = os.path.join(work, "bad.npy"), os.path.join(work, "refused.onnx")
    np.save(bad_x, np.zeros((2, 5), dtype=np.float32))
    if os.path.exists(out):
        os.remove(out)
    r = xylem(args, "export", "--config", config, "--checkpoint", checkpoint, "--out", out, "--input", bad_x, check=False)
    failures = 0
    if r.returncode != 1 or "bad.npy" not in r.stderr or os.path.exists(out):
        failures += 1
        print(f"refusal  FAIL an --input of the wrong shape: exit {r.returncode}, {r.stderr.strip()!r}, "
              f"file written: {os.path.exists(out)}", flush=True)
    r = xylem(args, "export", "--config", config, "--checkpoint", checkpoint, check=False)
    if r.returncode != 2 or "--out" not in r.stderr:
        failures += 1
        print(f"refusal  FAIL no --out: exit {r.returncode}, {r.stderr.strip()!r}", flush=True)
    print("refusals " + ("ok" if not failures else "FAIL"), flush=True)
    return failures


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--xylem", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--backends", default="", help="comma-separated (default: native, and opencl where available)")
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--reimport", default="mlp,lenet,resnet,vgg,conv_mlp,leaf_mlp,mix,char_rnn,char_gru,gpt,gpt_tanh",
                   help="models whose re-import must succeed")
    p.add_argument("--rtol", type=float, default=1e-4)
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args()
    if not args.backends:
        listed = xylem(args, "backends", check=False).stdout
        args.backends = "native" + (",opencl" if re.search(r"^opencl .* available ", listed, re.M) else "")
    print(f"backends: {args.backends}; rtol {args.rtol}", flush=True)
    os.makedirs(args.work, exist_ok=True)
    failures = 0
    for name in args.models.split(","):
        t0 = time.time()
        try:
            failures += check_model(args, name, args.backends.split(","))
        except RuntimeError as e:
            failures += 1
            print(f"{name:9s} FAIL {e}", flush=True)
        print(f"{name:9s} {time.time() - t0:.1f} s", flush=True)
    if "mlp" in args.models.split(","):
        failures += check_refusals(args)
    print("export parity: " + ("ok" if failures == 0 else f"{failures} failure(s)"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
