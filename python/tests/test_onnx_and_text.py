"""Model.from_onnx against PyTorch, and generate against `xylem sample` on the same checkpoint."""
import subprocess

import numpy as np
import pytest

import xylem

CHAR_CONFIG = """
backend = "native"
[data]
text = ["{text}"]
seq_len = 16
[[model.layers]]
type = "one_hot"
[[model.layers]]
type = "lstm"
hidden = 32
[[model.layers]]
type = "linear"
out = "vocab"
[loss]
type = "cross_entropy"
[solver]
type = "adam"
lr = 0.01
[train]
batch_size = 4
epochs = 1
seed = 5
max_steps = 30
"""


def _torch():
    """PyTorch, or the test skipped: absent, or (Debian's torch is built against NumPy 1) unable to
    exchange arrays with the NumPy 2 venv's NumPy."""
    torch = pytest.importorskip("torch")
    try:
        torch.zeros(1).numpy()
    except RuntimeError as e:
        pytest.skip(f"torch cannot exchange arrays with NumPy {np.__version__}: {e}")
    return torch


def test_from_onnx_matches_pytorch(tmp_path):
    torch = _torch()
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                              torch.nn.Linear(4 * 8 * 8, 5)).eval()
    x = torch.rand(6, 3, 8, 8)
    path = tmp_path / "net.onnx"
    torch.onnx.export(net, x, str(path), opset_version=13, input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    model = xylem.Model.from_onnx(path, backend="native")
    assert model.built and model.backend == "native"
    ours = model.predict(x.numpy())  # [N, 3, H, W]: three channels, through the array batch source
    with torch.no_grad():
        ref = net(x).numpy()
    assert ours.shape == (6, 5)
    assert np.allclose(ours, ref, rtol=1e-4, atol=1e-5), np.abs(ours - ref).max()
    assert sorted(model.state_dict()) == sorted(k for k in model.state_dict())


def test_from_onnx_of_two_inputs_and_two_outputs(tmp_path):
    torch = _torch()

    class TwoHeads(torch.nn.Module):  # token ids and features in; logits and the hidden state out
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(20, 6)
            self.proj = torch.nn.Linear(6, 6)
            self.head = torch.nn.Linear(6, 3)

        def forward(self, ids, feats):
            h = torch.tanh(self.emb(ids) + self.proj(feats))
            return self.head(h), h

    torch.manual_seed(0)
    net = TwoHeads().eval()
    ids, feats = torch.randint(0, 20, (5, 4)), torch.randn(5, 4, 6)
    path = tmp_path / "two.onnx"
    torch.onnx.export(net, (ids, feats), str(path), opset_version=17, input_names=["ids", "feats"],
                      output_names=["logits", "hidden"],
                      dynamic_axes={n: {0: "batch"} for n in ("ids", "feats", "logits", "hidden")})
    model = xylem.Model.from_onnx(path, backend="native")
    assert model.input_names == ["ids", "feats"]
    assert len(model.output_names) == 2
    with torch.no_grad():
        ref_logits, ref_hidden = (t.numpy() for t in net(ids, feats))
    logits, hidden = model.predict([ids.numpy(), feats.numpy()], batch_size=2)  # batches of 2, 2 and 1
    assert logits.shape == (5, 4, 3) and hidden.shape == (5, 4, 6)
    assert np.allclose(logits, ref_logits, rtol=1e-4, atol=1e-5), np.abs(logits - ref_logits).max()
    assert np.allclose(hidden, ref_hidden, rtol=1e-4, atol=1e-5), np.abs(hidden - ref_hidden).max()
    with pytest.raises(ValueError, match=r"takes 2 input\(s\) \(ids, feats\): pass a list of 2 arrays"):
        model.predict(feats.numpy())
    with pytest.raises(ValueError, match=r"x\[1\] \(input 'feats'\) holds 4 samples, x\[0\] 5"):
        model.predict([ids.numpy(), feats.numpy()[:4]])
    with pytest.raises(ValueError, match=r"model takes 2 input\(s\) \(ids, feats\), given 1: fit and evaluate feed one"):
        model.evaluate(ids.numpy(), ids.numpy())


def test_from_onnx_refuses_a_broken_file(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises((ValueError, RuntimeError), match="bad.onnx"):
        xylem.Model.from_onnx(bad)


def test_generate_matches_xylem_sample(tmp_path, xylem_cli):
    text = tmp_path / "corpus.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 40)
    cfg = tmp_path / "char.toml"
    cfg.write_text(CHAR_CONFIG.format(text=text))
    run = tmp_path / "run"
    subprocess.run([xylem_cli, "train", "--config", str(cfg), "--out", str(run)], check=True, capture_output=True)
    ckpt = run / "model.safetensors"
    cli = subprocess.run([xylem_cli, "sample", "--config", str(cfg), "--checkpoint", str(ckpt), "--prime", "the ",
                          "--length", "40", "--seed", "9", "--temperature", "0.8", "--top-k", "5"],
                         check=True, capture_output=True, text=True).stdout
    model = xylem.Model.load(ckpt, cfg)
    ours = model.generate("the ", length=40, temperature=0.8, top_k=5, seed=9)
    assert ours.startswith("the ") and len(ours) == 44
    assert ours == cli.rstrip("\n")
    with pytest.raises(ValueError, match="vocabulary"):
        xylem.Model.from_config(CHAR_CONFIG.format(text=text)).generate("x", 5)


def test_fit_on_a_text_matches_xylem_train(tmp_path, xylem_cli):
    corpus = "pack my box with five dozen liquor jugs. " * 50
    text = tmp_path / "corpus.txt"
    text.write_text(corpus)
    cfg = tmp_path / "char.toml"
    cfg.write_text(CHAR_CONFIG.format(text=text).replace("seq_len = 16", "seq_len = 16\nvalidation = 0.1"))
    run = tmp_path / "run"
    subprocess.run([xylem_cli, "train", "--config", str(cfg), "--out", str(run)], check=True, capture_output=True)
    cli = xylem.Model.load(run / "model.safetensors", cfg)
    model = xylem.Model.from_config(cfg)
    h = model.fit(corpus, verbose=0)  # the config's data.validation holds out the same end of the text
    cli.predict(np.zeros((1, 16), np.int32))
    ours, theirs = model.state_dict(), cli.state_dict()
    assert sorted(ours) == sorted(theirs) and all(np.array_equal(ours[k], theirs[k]) for k in ours)
    assert "val_loss" in h.history
    saved = tmp_path / "m.safetensors"
    model.save(saved)  # with the vocabulary: the loaded model generates
    again = xylem.Model.load(saved, cfg)
    assert again.generate("pack ", 30, seed=2) == model.generate("pack ", 30, seed=2)
    with pytest.raises(ValueError, match="no y"):
        model.fit(corpus, np.zeros(3, np.int32))


def test_from_onnx_of_a_model_whose_output_is_no_score_vector(tmp_path):
    # A model whose outputs are feature maps (an autoencoder, a segmentation net, a backbone) is
    # imported and predicts; only fit and evaluate need the loss to read its output. (from_onnx
    # used to check the importer's default cross_entropy against the output and refuse it.)
    torch = _torch()
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3, padding=1), torch.nn.ReLU()).eval()
    x = torch.rand(4, 2, 5, 5)
    path = tmp_path / "maps.onnx"
    torch.onnx.export(net, x, str(path), opset_version=13, input_names=["input"], output_names=["maps"],
                      dynamic_axes={"input": {0: "batch"}, "maps": {0: "batch"}})
    model = xylem.Model.from_onnx(path, backend="native")
    ours = model.predict(x.numpy())
    with torch.no_grad():
        ref = net(x).numpy()
    assert ours.shape == (4, 3, 5, 5)
    assert np.allclose(ours, ref, rtol=1e-4, atol=1e-5), np.abs(ours - ref).max()
    labels = np.zeros(4, dtype=np.int32)
    for call in (lambda: model.evaluate(x.numpy(), labels), lambda: model.fit(x.numpy(), labels, verbose=0)):
        with pytest.raises(ValueError, match=r"loss cross_entropy: expects the model to output one score vector"):
            call()
    assert np.array_equal(model.predict(x.numpy()), ours)  # still usable
