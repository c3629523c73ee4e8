#!/usr/bin/python3
"""PyTorch peer (CPU, or CUDA with --device cuda) of xylem's examples/gpt_char.toml (nanoGPT's shakespeare_char CPU config), for benchmarking.

The model is nanoGPT's GPT (github.com/karpathy/nanoGPT, model.py): token and position
embeddings, n_layer pre-LN blocks x + attn(ln_1(x)), then + mlp(ln_2(.)), a final LayerNorm and
an output head tied to the token embedding. Attention is written out, as nanoGPT's non-flash path
(torch 1.13 has no scaled_dot_product_attention): att = (q @ k^T) / sqrt(head_size), the upper
triangle masked to -inf, softmax, @ v; q, k and v are c_attn's outputs split in that order and the
heads as q.view(B, T, nh, hs).transpose(1, 2). LayerNorm with bias, exact GELU (erf), no dropout.
GPT-2's init as nanoGPT's _init_weights: every linear and embedding N(0, 0.02), biases 0, both
c_proj weights N(0, 0.02/sqrt(2 * n_layer)), LayerNorm weight 1 and bias 0. The state_dict keys
are xylem's parameter names (transformer.wte.weight, transformer.h.0.attn.c_attn.weight, ...);
lm_head.weight is the same tensor as transformer.wte.weight and is left out of every file written
here, as xylem's tied head has no parameter of its own. The mask is a non-persistent buffer (not
in the state_dict).

The data are xylem's [data] text with sampling = "windows" (train/text_data.cpp):
  - the corpus: the regular files of each --text folder (not recursive, links followed) in sorted
    name order less those matching an --exclude glob, concatenated as bytes;
  - the vocabulary: the distinct byte values, sorted; token i is the i-th;
  - validation: the last floor(--validation * chars + 0.5) characters (at least 1; std::llround),
    the training text the rest;
  - training batches: windows tokens[i:i+T] with the targets tokens[i+1:i+T+1], i in
    [0, len(train) - T). xylem draws an epoch's windows as a permutation of every offset (its fit
    loop's shuffle), which this script cannot reproduce; it draws --batch-size offsets uniformly
    at random per iteration, as nanoGPT's get_batch does. Same distribution of windows, other
    windows.
  - validation loss: xylem's window_layout of the held-out text: (len - 1) // T non-overlapping
    windows in order, the targets shifted by one; the mean cross-entropy per character over all of
    them, in batches of --batch-size (the last one partial), eval mode, no dropout. Deterministic:
    the same parameters give the same number every time.

The recipe as the config: cross-entropy, mean per character; torch.optim.AdamW(lr 1e-3, betas
(0.9, 0.99), eps 1e-8, weight_decay 0.1) with two groups as xylem's no_decay_bias = true
(solvers/solver.cpp: parameters of rank <= 1 -- biases and LayerNorm weights and biases -- get no
weight decay; every matrix, both embeddings included, does: nanoGPT's configure_optimizers rule);
gradients clipped with clip_grad_norm_(1.0) (xylem: scale by min(1, 1.0 / (norm + 1e-6)), the
same); the learning rate of xylem's solvers/schedule.cpp before the step after s steps (s = 0, 1,
...): eta_min + (lr - eta_min) * (1 + cos(pi * min(s, t_max) / t_max)) / 2, times
warmup_start + (1 - warmup_start) * s / warmup_steps while s < warmup_steps (warmup_start 0: the
first step runs at lr 0; nanoGPT's own get_lr differs: (it + 1) / (warmup + 1) and a cosine that
starts after the warm-up). Batch 12, block 64, 2,000 iterations.

Prints one JSON object per line on stdout:
  {"kind": "data", "chars", "vocab", "train_chars", "validation_chars", "validation_windows", ...}
  {"kind": "progress", "iter", "lr", "train_loss" (mean over the iterations since the last row),
   "step_seconds" (median iteration time over the windows of --step-window iterations in those
   iterations), "val_loss" (every --eval-every iterations)}    every --print-every iterations
  {"kind": "final", "iters", "train_loss" (the last --print-every iterations), "val_loss",
   "seconds" (training, evaluation excluded), "step_seconds" and the StepClock fields of
   torch_mlp.py over the whole run (the clock is paused while validation runs)}
  {"kind": "sample", ...}: generation speed at batch 1 after training, temperature 1, top-k 10,
   --sample-tokens tokens after the --prime: "no_cache" is nanoGPT's generate (the whole context,
   cropped to the last block_size tokens, recomputed per token); "kv_cache" runs one token per
   forward against cached keys and values and, when the cache holds block_size positions, keeps
   the last block_size / 2 tokens and feeds them again one at a time (xylem's sampler,
   train/sample.cpp, does the same). tokens/s = generated tokens / seconds.

--save-init FILE writes the initial parameters (before any step) as a safetensors checkpoint of
examples/gpt_char.toml, with the corpus's vocabulary as metadata xylem.vocabulary (the key of
train/text_data.h), so that `xylem eval` / `xylem sample --checkpoint FILE` accept it; with
--iters 0 nothing else runs.

--parity-fixture FILE writes the fixture of tests/layers/gpt_parity_test.cpp instead of training
(see parity_fixture below; tests/fixtures/gpt_parity.toml is its xylem config).

--device cuda: the model, the training and validation tokens on the GPU; the batch offsets are
drawn on the CPU from the same generator as on cpu (the same windows), copied to the GPU (12
integers, pinned and non-blocking as nanoGPT does) and gathered there. The training loss is summed on the device and read at the
--print-every rows only (on cpu: read every iteration, as before); every clock read (start,
each --step-window, pause before validation, the end) follows torch.cuda.synchronize. No untimed
warm-up: the first window is left out of step_seconds, not "seconds". Sampling runs on the device.

Run it with Debian's interpreter, /usr/bin/python3 (python3-torch 1.13), or on a GPU machine with
any Python whose torch has CUDA.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_char_rnn import corpus_files
from torch_mlp import StepClock, device_info, sync
from torch_resnet import write_safetensors

VOCABULARY_KEY = "xylem.vocabulary"  # train/include/xylem/train/text_data.h kVocabularyKey


# ---- the model (nanoGPT's model.py, no dropout, no flash attention) ----

class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        assert n_embd % n_head == 0
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head, self.n_embd = n_head, n_embd
        mask = torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size)
        self.register_buffer("bias", mask, persistent=False)  # nanoGPT's name; not in the state_dict

    def heads(self, x):
        B, T, C = x.size()
        return x.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = self.heads(q), self.heads(k), self.heads(v)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)

    def forward_cached(self, x, cache):
        """x: the new positions (B, Tn, C); cache: a dict holding this layer's keys and values so
        far (B, nh, Tc, hs), extended here. Causal, bottom-right aligned (new position i sees every
        cached one and new ones up to i)."""
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = self.heads(q), self.heads(k), self.heads(v)
        if "k" in cache:
            k = torch.cat([cache["k"], k], dim=2)
            v = torch.cat([cache["v"], v], dim=2)
        cache["k"], cache["v"] = k, v
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        if T > 1:
            L = k.size(2)
            att = att.masked_fill(self.bias[:, :, L - T:L, :L] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.gelu = nn.GELU()  # exact (erf), as xylem's gelu default
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)  # eps 1e-5, with bias
        self.attn = CausalSelfAttention(n_embd, n_head, block_size)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = MLP(n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))

    def forward_cached(self, x, cache):
        x = x + self.attn.forward_cached(self.ln_1(x), cache)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab, block_size=64, n_layer=4, n_head=4, n_embd=128):
        super().__init__()
        self.block_size, self.n_layer = block_size, n_layer
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, n_embd),
            wpe=nn.Embedding(block_size, n_embd),
            h=nn.ModuleList([Block(n_embd, n_head, block_size) for _ in range(n_layer)]),
            ln_f=nn.LayerNorm(n_embd),
        ))
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied, as nanoGPT
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx):
        B, T = idx.size()
        assert T <= self.block_size
        pos = torch.arange(0, T, dtype=torch.long, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))

    def forward_cached(self, idx, caches):
        """The logits of the new tokens idx (B, Tn) after the positions the caches hold (one dict
        per block; empty dicts start a sequence)."""
        B, T = idx.size()
        start = caches[0]["k"].size(2) if "k" in caches[0] else 0
        assert start + T <= self.block_size
        pos = torch.arange(start, start + T, dtype=torch.long, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block, cache in zip(self.transformer.h, caches):
            x = block.forward_cached(x, cache)
        return self.lm_head(self.transformer.ln_f(x))


def state_tensors(model, prefix=""):
    """The state_dict as xylem's checkpoint holds it: float32, the tied lm_head.weight left out."""
    return [(prefix + k, v.detach().cpu().float().numpy()) for k, v in model.state_dict().items()
            if k != "lm_head.weight"]


# ---- the recipe ----

def scheduled_lr(base, s, t_max, eta_min, warmup_steps, warmup_start=0.0):
    """xylem's solvers/schedule.cpp, type cosine, unit step: the rate of the step after s steps."""
    x = min(s, t_max) / t_max
    lr = eta_min + (base - eta_min) * (1 + math.cos(math.pi * x)) / 2
    if s < warmup_steps:
        lr *= warmup_start + (1 - warmup_start) * s / warmup_steps
    return lr


def make_optimizer(model, lr, betas, weight_decay, eps=1e-8):
    """AdamW with xylem's no_decay_bias rule: no weight decay on parameters of rank <= 1."""
    params = list(model.parameters())  # the tied weight once
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=betas, eps=eps)


def train_step(model, opt, x, y, clip_norm):
    logits = model(x)
    loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if clip_norm > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
    opt.step()
    return loss, logits


# ---- the data ----

def load_text(paths, excludes, validation):
    files = corpus_files(paths, excludes)
    text = b"".join(open(f, "rb").read() for f in files)
    if not text:
        sys.exit("the text is empty")
    vocab = sorted(set(text))
    index = np.full(256, -1, dtype=np.int64)
    index[vocab] = np.arange(len(vocab))
    tokens = torch.from_numpy(index[np.frombuffer(text, dtype=np.uint8)])
    held = max(1, int(math.floor(validation * len(text) + 0.5))) if validation > 0 else 0
    return files, text, vocab, tokens[:len(tokens) - held], tokens[len(tokens) - held:]


def get_batch(data, batch, block, gen):
    """nanoGPT's get_batch: `batch` windows at uniformly drawn offsets in [0, len - block).
    `gen` is a CPU generator; data on a GPU are gathered there at the offsets drawn on the CPU."""
    ix = torch.randint(len(data) - block, (batch,), generator=gen)
    if data.device.type != "cpu":
        # pinned and non-blocking, as nanoGPT: a pageable copy would synchronise the host each iteration
        at = ix.pin_memory().to(data.device, non_blocking=True)[:, None] + torch.arange(block, device=data.device)
        return data[at], data[at + 1]
    x = torch.stack([data[i:i + block] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + block] for i in ix])
    return x, y


def validation_windows(val, block):
    """xylem's window_layout: (len - 1) // block non-overlapping windows and their next characters."""
    n = (len(val) - 1) // block
    return val[:n * block].view(n, block), val[1:n * block + 1].view(n, block)


@torch.no_grad()
def evaluate(model, vx, vy, batch):
    was = model.training
    model.eval()
    total = 0.0
    for s in range(0, vx.size(0), batch):
        logits = model(vx[s:s + batch])
        total += F.cross_entropy(logits.reshape(-1, logits.size(-1)), vy[s:s + batch].reshape(-1),
                                 reduction="sum").item()
    model.train(was)
    return total / vy.numel()


# ---- sampling ----

def top_k_draw(logits, top_k, temperature, gen):
    """nanoGPT's generate: logits / temperature, everything below the k-th largest to -inf, softmax, multinomial."""
    logits = logits / temperature
    if top_k:
        v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
        logits[logits < v[:, [-1]]] = -float("inf")
    probs = F.softmax(logits, dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=gen)


@torch.inference_mode()
def generate_no_cache(model, prime, n, top_k, temperature, gen):
    idx = prime
    for _ in range(n):
        idx_cond = idx if idx.size(1) <= model.block_size else idx[:, -model.block_size:]
        logits = model(idx_cond)[:, -1, :]
        idx = torch.cat((idx, top_k_draw(logits, top_k, temperature, gen)), dim=1)
    return idx


@torch.inference_mode()
def generate_kv_cache(model, prime, n, top_k, temperature, gen):
    """One token per forward with the key/value cache; a full context (block_size positions) keeps
    its last half, fed again token by token into fresh caches (train/sample.cpp's policy)."""
    context = model.block_size
    caches = [{} for _ in model.transformer.h]
    history, out, logits = [], [], None

    def feed(token):
        nonlocal caches, history, logits
        if len(history) == context:
            history = history[-(context // 2):]
            caches = [{} for _ in model.transformer.h]
            for t in history:
                model.forward_cached(torch.tensor([[t]], device=prime.device), caches)
        history.append(token)
        logits = model.forward_cached(torch.tensor([[token]], device=prime.device), caches)[:, -1, :]

    for t in prime[0].tolist():
        feed(t)
    for i in range(n):
        t = int(top_k_draw(logits, top_k, temperature, gen))
        out.append(t)
        if i + 1 < n:
            feed(t)
    return out


def sample_benchmark(model, vocab, args):
    model.eval()
    index = {b: i for i, b in enumerate(vocab)}
    dev = next(model.parameters()).device
    prime = torch.tensor([[index[b] for b in args.prime.encode()]], dtype=torch.long, device=dev)
    row = {"kind": "sample", "tokens": args.sample_tokens, "batch": 1, "prime_chars": prime.size(1),
           "temperature": 1.0, "top_k": args.top_k}
    for name, fn in (("no_cache", generate_no_cache), ("kv_cache", generate_kv_cache)):
        gen = torch.Generator(device=dev).manual_seed(args.seed)
        sync(dev)
        t0 = time.perf_counter()
        out = fn(model, prime, args.sample_tokens, args.top_k, 1.0, gen)
        sync(dev)
        seconds = time.perf_counter() - t0
        tokens = out[0, prime.size(1):].tolist() if torch.is_tensor(out) else out
        row[name] = {"seconds": seconds, "tokens_per_second": args.sample_tokens / seconds,
                     "text": bytes(vocab[t] for t in tokens[:80]).decode("utf-8", "replace")}
    model.train()
    return row


# ---- the parity fixture ----

PARITY = {"n_layer": 2, "n_head": 4, "n_embd": 32, "block_size": 16, "vocab": 27, "batch": 4, "steps": 20,
          "lr": 1e-3, "beta1": 0.9, "beta2": 0.99, "eps": 1e-8, "weight_decay": 0.1, "clip_norm": 1.0,
          "t_max": 20, "eta_min": 1e-4, "warmup_steps": 5, "seed": 7}


def parity_model(p):
    return GPT(p["vocab"], p["block_size"], p["n_layer"], p["n_head"], p["n_embd"])


def run_parity(model, tokens, p):
    """Eval logits of batch 0, then `steps` AdamW steps (batch s: tokens[s]; the schedule's rate
    before each; clipping), then batch 0's eval logits again. Returns (logits, losses, final
    logits, the rates) and leaves the model trained."""
    x_all, y_all = tokens[:, :, :-1].long(), tokens[:, :, 1:].long()
    opt = make_optimizer(model, p["lr"], (p["beta1"], p["beta2"]), p["weight_decay"], p["eps"])
    model.eval()
    with torch.no_grad():
        logits_eval = model(x_all[0]).clone()
    model.train()
    losses, lrs = [], []
    for s in range(p["steps"]):
        lr = scheduled_lr(p["lr"], s, p["t_max"], p["eta_min"], p["warmup_steps"])
        for g in opt.param_groups:
            g["lr"] = lr
        loss, _ = train_step(model, opt, x_all[s], y_all[s], p["clip_norm"])
        losses.append(loss.item())
        lrs.append(lr)
    model.eval()
    with torch.no_grad():
        logits_eval_final = model(x_all[0]).clone()
    return logits_eval, losses, logits_eval_final, lrs


def parity_fixture(path):
    """A small GPT (tests/fixtures/gpt_parity.toml: 2 blocks of 4 heads at 32 channels, a context
    of 16, a vocabulary of 27) initialised from a fixed seed, and what training it does, computed
    in float64 from the float32 initial values: init.<name> (every parameter, lm_head.weight
    left out: tied), tokens [steps, batch, block + 1] int32 (uniform random tokens; batch s is
    tokens[s, :, :-1] with targets tokens[s, :, 1:]), logits_eval (batch 0, initial parameters),
    losses (each step's mean cross-entropy per character), final.<name> after `steps` steps of
    AdamW (betas 0.9/0.99, weight decay 0.1 on rank >= 2 only, global-norm clipping at 1.0) at
    xylem's schedule (warm-up 5 steps from 0, cosine to 1e-4 at t_max 20, unit step: lr 0 at
    step 0) and logits_eval_final (batch 0 after the steps). The float32 run's distance from
    float64 is printed: the headroom the test's tolerance leaves."""
    p = PARITY
    torch.manual_seed(p["seed"])
    model = parity_model(p)  # stays as initialised
    init = {k: v.clone() for k, v in model.state_dict().items()}
    gen = torch.Generator().manual_seed(p["seed"])
    tokens = torch.randint(p["vocab"], (p["steps"], p["batch"], p["block_size"] + 1), generator=gen,
                           dtype=torch.int64).to(torch.int32)

    results = {}
    for dtype in (torch.float64, torch.float32):
        m = parity_model(p)
        m.load_state_dict(init)
        m.to(dtype)
        results[dtype] = (m,) + run_parity(m, tokens, p)
    ref, ev, losses, ev_final, lrs = results[torch.float64]
    f32 = results[torch.float32]

    def normalised(a, b):  # support/backends.h's measure: max|a - b| / max(1, max|b|)
        a, b = a.double(), b.double()
        return float((a - b).abs().max() / max(1.0, float(b.abs().max())))

    ref_state, f32_state = ref.state_dict(), f32[0].state_dict()
    per_tensor = {k: normalised(f32_state[k], v) for k, v in ref_state.items() if k != "lm_head.weight"}
    worst = max(per_tensor, key=per_tensor.get)
    print(json.dumps({
        "float32_vs_float64": {
            "logits_eval": normalised(f32[1], ev), "logits_eval_final": normalised(f32[3], ev_final),
            "final_state_worst": [worst, per_tensor[worst]],
            "losses": max(abs(a - b) for a, b in zip(losses, f32[2]))},
        "losses": losses, "lrs": lrs}), flush=True)

    tensors = [("init." + k, v.float().numpy()) for k, v in init.items() if k != "lm_head.weight"] + [
        ("tokens", tokens.numpy()), ("lrs", np.array(lrs, dtype=np.float32)), ("logits_eval", ev.float().numpy()),
        ("losses", np.array(losses, dtype=np.float32)), ("logits_eval_final", ev_final.float().numpy())] + \
        state_tensors(ref, "final.")
    meta = {"producer": "bench/torch_gpt.py --parity-fixture", "torch": torch.__version__,
            "reference": "float64", **{k: json.dumps(v) for k, v in p.items()}}
    write_safetensors(path, tensors, meta)
    print(json.dumps({"wrote": path, "tensors": len(tensors), "bytes": os.path.getsize(path)}), flush=True)


# ---- the benchmark ----

class PausableClock(StepClock):
    """StepClock whose time excludes the pauses (validation between iterations)."""

    def pause(self):
        sync(self.device)
        self.paused_at = time.perf_counter()

    def resume(self):
        self.t0 += time.perf_counter() - self.paused_at


def window_median(marks, first, last):
    """Median seconds per iteration over the clock's windows ending in (first, last]; the run's
    first window (library warm-up) is left out unless it is the only one there."""
    per, prev_s, prev_t = [], 0, 0.0
    for s, t in marks:
        if first < s <= last:
            per.append((prev_s == 0, (t - prev_t) / (s - prev_s)))
        prev_s, prev_t = s, t
    steady = [v for is_first, v in per if not is_first] or [v for _, v in per]
    return statistics.median(steady) if steady else None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--text", nargs="+", default=["/usr/share/games/fortunes"])
    p.add_argument("--exclude", nargs="*", default=["*.dat", "*.u8"])
    p.add_argument("--validation", type=float, default=0.05)
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=12)
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--min-lr", type=float, default=1e-4, help="the cosine's eta_min")
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.99)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--clip-norm", type=float, default=1.0)
    p.add_argument("--warmup-steps", type=int, default=100)
    p.add_argument("--t-max", type=int, default=2000, help="the cosine's period in steps")
    p.add_argument("--iters", type=int, default=2000)
    p.add_argument("--print-every", type=int, default=100)
    p.add_argument("--eval-every", type=int, default=250, help="validation every N iterations (xylem: each epoch of 250 steps) and at the end")
    p.add_argument("--step-window", type=int, default=10, help="read the clock every N iterations")
    p.add_argument("--sample-tokens", type=int, default=500, help="tokens generated by the sampling benchmark (0: none)")
    p.add_argument("--top-k", type=int, default=10)
    p.add_argument("--prime", default="\n")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads(N); 0 keeps PyTorch's default")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--save-init", metavar="FILE", help="write the initial parameters as a xylem checkpoint")
    p.add_argument("--parity-fixture", metavar="FILE", help="write the parity test's fixture and exit")
    args = p.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if args.parity_fixture:
        parity_fixture(args.parity_fixture)
        return 0
    torch.manual_seed(args.seed)
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"

    files, text, vocab, train, val = load_text(args.text, args.exclude, args.validation)
    T, B = args.block_size, args.batch_size
    vx, vy = validation_windows(val, T)
    if cuda:
        train, vx, vy = train.to(dev), vx.to(dev), vy.to(dev)
    print(json.dumps({"kind": "data", "files": len(files), "chars": len(text), "vocab": len(vocab),
                      "train_chars": len(train), "validation_chars": len(val), "train_windows": len(train) - T,
                      "validation_windows": vx.size(0), "torch": torch.__version__,
                      "threads": torch.get_num_threads(), **device_info(dev)}), flush=True)

    model = GPT(len(vocab), T, args.n_layer, args.n_head, args.n_embd)
    if args.save_init:
        write_safetensors(args.save_init, state_tensors(model),
                          {"format": "pt", "producer": "bench/torch_gpt.py", "torch": torch.__version__,
                           "seed": str(args.seed),
                           VOCABULARY_KEY: json.dumps(list(vocab), separators=(",", ":"))})
    if args.iters <= 0:
        return 0
    model.to(dev)  # after --save-init (whose tensors go through the CPU anyway); keeps the tie
    opt = make_optimizer(model, args.lr, (args.beta1, args.beta2), args.weight_decay)
    gen = torch.Generator().manual_seed(args.seed)
    print(json.dumps({"kind": "model", "parameters": sum(q.numel() for q in model.parameters()),
                      "n_layer": args.n_layer, "n_head": args.n_head, "n_embd": args.n_embd,
                      "block_size": T, "batch_size": B}), flush=True)

    model.train()
    clock = PausableClock(dev, args.step_window)
    clock.start()
    loss_sum, loss_n, last_row, val_loss, lr = 0.0, 0, 0, None, args.lr
    loss_dev = torch.zeros((), device=dev) if cuda else None
    for it in range(args.iters):
        lr = scheduled_lr(args.lr, it, args.t_max, args.min_lr, args.warmup_steps)
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = get_batch(train, B, T, gen)
        loss, _ = train_step(model, opt, x, y, args.clip_norm)
        if cuda:
            loss_dev += loss.detach()  # read at the rows only
        else:
            loss_sum += loss.item()
        loss_n += 1
        done = it + 1
        clock.after_step(done)
        last = done == args.iters
        if done % args.print_every == 0 or last:
            if cuda:
                loss_sum = loss_dev.item()
            row = {"kind": "progress", "iter": done, "lr": lr, "train_loss": loss_sum / loss_n,
                   "step_seconds": window_median(clock.marks, last_row, done)}
            if done % args.eval_every == 0 or last:
                clock.pause()
                val_loss = evaluate(model, vx, vy, B)
                clock.resume()
                row["val_loss"] = val_loss
            if not last:
                print(json.dumps(row), flush=True)
                loss_sum, loss_n, last_row = 0.0, 0, done
                if cuda:
                    loss_dev.zero_()
    clock.pause()
    seconds = clock.paused_at - clock.t0  # the pauses for validation already taken off t0
    print(json.dumps({"kind": "final", "iters": args.iters, "lr": lr, "train_loss": loss_sum / max(loss_n, 1),
                      "val_loss": val_loss, "seconds": seconds, **clock.fields()}), flush=True)
    if args.sample_tokens > 0:
        print(json.dumps(sample_benchmark(model, vocab, args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
