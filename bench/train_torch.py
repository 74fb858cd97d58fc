#!/usr/bin/env python3
"""train_torch.py: PyTorch eager equivalents of the two training examples, for printing
tensord's training throughput next to PyTorch's on the same GPU (issue 15;
tests/gpu/train-on-gpu-host.sh runs both).

  cnn  mirrors examples/fashion-mnist --model cnn (cnn.c, main.c): [B, 784] -> [B, 1, 28, 28]
       -> conv 3x3 pad 1 no bias (32) -> batch norm -> relu -> max pool 2 -> conv 3x3 (64)
       -> batch norm -> relu -> max pool 2 -> dropout 0.25 -> linear 3136 -> 10; mean
       cross-entropy; He-normal conv weights (std sqrt(2 / fan_in)), the linear layer
       std sqrt(1 / 3136), batch-norm weights 1, biases 0; batch norm with momentum 0.1,
       eps 1e-5 (PyTorch's); Adam (0.9, 0.999, eps 1e-8, no weight decay) at peak lr 0.002
       decayed per step by 0.5 (1 + cos(pi t / T)) over all T steps; batch 128, the last
       batch of an epoch smaller; the same SplitMix64 Fisher-Yates shuffle as the example,
       pixels / 255 per batch on the host; evaluation in batches of 1000 with the running
       statistics.
  lm   mirrors examples/fortune-lm (main.c): GPT-2's layout on the 256 byte values;
       x = wte[idx] + wpe; per layer x += W_o attn(LN(x)), x += W_proj gelu(W_fc LN(x))
       (4x wide, exact erf GELU); logits = LN(x) W_head (no bias); causal attention; weights
       N(0, 0.02), the residual projections 0.02 / sqrt(2 layers), LN weights 1, biases 0;
       AdamW (0.9, 0.99, eps 1e-8, weight decay 0.01 on every parameter) at peak lr 0.003,
       linear warmup over the first 10% of steps, then cosine to a tenth; the same training
       windows (SplitMix64 offsets) and the same 4 fixed validation batches as the example.
       --bf16 as the example's: parameters stay f32, each linear layer casts its input and
       weight to bf16, multiplies, casts the product back to f32 and adds the bias in f32;
       attention, softmax, layer norm and the loss stay f32.

Both read what the examples read (Fashion-MNIST idx .gz files; the fortune files in name
order without *.dat, *.u8, links and dot files, or one concatenated file) and run eagerly
(no torch.compile). On a GPU TF32 is off for matmuls and cuDNN convolutions unless --tf32
(tensord's f32 matmul and im2col conv are full f32), batches go through pinned memory with
non_blocking copies (as DataLoader(pin_memory=True) would), and the loss is summed on the
device and read only at report points, as the examples do. Attention is PyTorch's
F.scaled_dot_product_attention where it exists (2.0 and later; --attention math, or torch
1.13, computes q k^T / sqrt(E), the causal mask, softmax and the product with v, as
tensord's composite does). Initial weights and dropout masks come from torch's generators
(seeded by --seed), not tensord's Philox streams: the same distributions, other draws, so
losses agree in trend, not bit for bit.

Throughput, defined as the examples define it:
  img/s     (cnn) images of the epoch / wall seconds of the epoch, per epoch: the clock
            starts after the shuffle and stops after the epoch's last loss read (it covers
            filling and uploading batches, every step, and the report reads; the first
            epoch also pays for start-up such as cuDNN/cuBLAS initialisation, in both).
            The last line, `torch cnn: img/s X ...`, gives the last epoch's.
  tokens/s  (lm) batch * context * timed steps / their wall seconds. fortune-lm prints
            tok/s per evaluation line over the steps since the previous line, evaluation
            excluded; here the clock also stops during evaluation, and the first
            --warmup-steps steps (default 10; train-on-gpu-host.sh passes --eval-every, so
            both sides drop the same first window) are not timed at all. The last line is
            `torch lm: tokens/s X ...`.

Usage: python3 bench/train_torch.py cnn --data DIR [--epochs N] [--batch N] [--limit-train N]
           [--limit-test N] [--lr X] [--seed N] [--device cuda|cpu] [--tf32]
       python3 bench/train_torch.py lm --text FILE_OR_DIR [--steps N] [--layers N] [--dim N]
           [--heads N] [--context N] [--batch N] [--bf16] [--eval-every N]
           [--warmup-steps N] [--limit-bytes N] [--device cuda|cpu] [--attention sdpa|math]
Runs on PyTorch 1.13 (Debian 12's python3-torch) and 2.x."""
import argparse
import gzip
import math
import os
import stat
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def mix64(z):
    """SplitMix64's finaliser (fm_rng_mix in examples/fashion-mnist/rng.h)."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


class Clock:
    """Wall time with the device's queue drained at each reading."""

    def __init__(self, dev):
        self.sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    def now(self):
        self.sync()
        return time.perf_counter()


def setup_device(args):
    dev = torch.device(args.device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            sys.exit("train_torch.py: --device %s but torch.cuda.is_available() is false"
                     % args.device)
        if hasattr(torch.backends.cuda.matmul, "fp32_precision"):  # 2.9 and later
            mode = "tf32" if args.tf32 else "ieee"
            torch.backends.cuda.matmul.fp32_precision = mode
            torch.backends.cudnn.conv.fp32_precision = mode
        else:  # cuDNN's default allows TF32
            torch.backends.cuda.matmul.allow_tf32 = args.tf32
            torch.backends.cudnn.allow_tf32 = args.tf32
        name = torch.cuda.get_device_name(dev)
    else:
        name = "cpu, %d threads" % torch.get_num_threads()
    return dev, name


def to_device(arr, dev):
    """A host array onto dev: through pinned memory and a non-blocking copy on a GPU (the
    caching host allocator keeps the pinned block until the copy is done)."""
    t = torch.from_numpy(arr)
    if dev.type == "cuda":
        return t.pin_memory().to(dev, non_blocking=True)
    return t


# ---------------------------------------------------------------- Fashion-MNIST CNN

def read_idx(path, magic, limit):
    """An idx file (gzip'ed or not) as a uint8 array: [n, 28, 28] images or [n] labels."""
    if not os.path.exists(path) and path.endswith(".gz") and os.path.exists(path[:-3]):
        path = path[:-3]
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    rank = magic & 0xFF
    if len(data) < 4 + 4 * rank or struct.unpack(">I", data[:4])[0] != magic:
        sys.exit("train_torch.py: %s: not an idx file with magic 0x%08x" % (path, magic))
    dims = struct.unpack(">%dI" % rank, data[4:4 + 4 * rank])
    arr = np.frombuffer(data, np.uint8, offset=4 + 4 * rank)
    if arr.size != int(np.prod(dims)) or (rank == 3 and dims[1:] != (28, 28)):
        sys.exit("train_torch.py: %s: dims %s do not match its %d data bytes"
                 % (path, dims, arr.size))
    arr = arr.reshape(dims)
    return arr[:limit] if limit else arr


def load_split(data_dir, prefix, limit):
    x = read_idx(os.path.join(data_dir, prefix + "-images-idx3-ubyte.gz"), 0x00000803, limit)
    y = read_idx(os.path.join(data_dir, prefix + "-labels-idx1-ubyte.gz"), 0x00000801, limit)
    if len(x) != len(y) or (y.size and y.max() >= 10):
        sys.exit("train_torch.py: %s: %d images, %d labels (or a label above 9)"
                 % (prefix, len(x), len(y)))
    return x.reshape(len(x), 784), y.astype(np.int64)


def shuffle(order, state):
    """Fisher-Yates with fm_rng_below (rng.h), one generator across epochs: the example's
    order. Returns the generator's new state."""
    n = len(order)
    for i in range(n - 1, 0, -1):
        bound = i + 1
        threshold = (-bound) % bound  # 2^64 mod bound
        while True:
            state = (state + GOLDEN) & M64
            x = mix64(state)
            if x >= threshold:
                break
        j = x % bound
        order[i], order[j] = order[j], order[i]
    return state


class CNN:
    """cnn.c's model: parameters and running statistics as plain tensors."""

    def __init__(self, dev, seed, c1=32, c2=64, dropout=0.25):
        g = torch.Generator().manual_seed(seed)

        def normal(shape, std):
            return (torch.randn(shape, generator=g) * std).to(dev).requires_grad_()

        def full(n, v):
            return torch.full((n,), float(v), device=dev).requires_grad_()

        self.dropout = dropout
        self.conv1 = normal((c1, 1, 3, 3), math.sqrt(2.0 / 9))
        self.bn1_w, self.bn1_b = full(c1, 1), full(c1, 0)
        self.conv2 = normal((c2, c1, 3, 3), math.sqrt(2.0 / (c1 * 9)))
        self.bn2_w, self.bn2_b = full(c2, 1), full(c2, 0)
        self.fc_w = normal((10, c2 * 49), math.sqrt(1.0 / (c2 * 49)))  # nn.Linear's layout
        self.fc_b = full(10, 0)
        self.running = [torch.zeros(c1, device=dev), torch.ones(c1, device=dev),
                        torch.zeros(c2, device=dev), torch.ones(c2, device=dev)]

    def params(self):
        return [self.conv1, self.bn1_w, self.bn1_b, self.conv2, self.bn2_w, self.bn2_b,
                self.fc_w, self.fc_b]

    def logits(self, x, training):
        h = x.view(-1, 1, 28, 28)
        for k, (w, bw, bb) in enumerate(((self.conv1, self.bn1_w, self.bn1_b),
                                         (self.conv2, self.bn2_w, self.bn2_b))):
            h = F.conv2d(h, w, padding=1)
            h = F.batch_norm(h, self.running[2 * k], self.running[2 * k + 1], bw, bb,
                             training=training, momentum=0.1, eps=1e-5)
            h = F.max_pool2d(F.relu(h), 2)
        h = h.flatten(1)
        if training and self.dropout > 0:
            h = F.dropout(h, self.dropout, training=True)
        return F.linear(h, self.fc_w, self.fc_b)


def run_cnn(args):
    dev, dev_name = setup_device(args)
    torch.manual_seed(args.seed)
    xtr, ytr = load_split(args.data, "train", args.limit_train)
    xte, yte = load_split(args.data, "t10k", args.limit_test)
    n = len(xtr)
    model = CNN(dev, args.seed)
    opt = torch.optim.Adam(model.params(), lr=args.lr, betas=(0.9, 0.999), eps=1e-8)
    print("torch cnn: %d training / %d test images on %s (%s); model cnn conv32-conv64-fc10 "
          "(batch norm, dropout 0.25), batch %d, adam lr %g (cosine), seed %d; pytorch %s"
          % (n, len(xte), args.device, dev_name, args.batch, args.lr, args.seed,
             torch.__version__), flush=True)
    clock = Clock(dev)
    steps = (n + args.batch - 1) // args.batch
    total = steps * args.epochs
    every = (steps + 9) // 10
    order = list(range(n))
    state = args.seed & M64
    t_run = clock.now()
    final_loss, ips = float("nan"), 0.0
    for epoch in range(1, args.epochs + 1):
        state = shuffle(order, state)
        idx_all = np.array(order, dtype=np.int64)
        t0 = clock.now()
        acc = torch.zeros((), device=dev)
        epoch_sum, window = 0.0, 0
        for step in range(steps):
            start = step * args.batch
            idx = idx_all[start:start + args.batch]
            x = to_device(xtr[idx].astype(np.float32) / np.float32(255), dev)
            y = to_device(ytr[idx], dev)
            t = (epoch - 1) * steps + step
            for group in opt.param_groups:
                group["lr"] = args.lr * 0.5 * (1 + math.cos(math.pi * t / total))
            loss = F.cross_entropy(model.logits(x, True), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            acc += loss.detach()
            window += 1
            if (step + 1) % every != 0 and step + 1 != steps:
                continue
            s = acc.item()
            if not math.isfinite(s):
                sys.exit("train_torch.py: the loss diverged (%g) in epoch %d near step %d"
                         % (s, epoch, step + 1))
            epoch_sum += s
            el = time.perf_counter() - t0
            print("epoch %d/%d  step %d/%d  loss %.6f  %.0f img/s"
                  % (epoch, args.epochs, step + 1, steps, s / window,
                     (start + len(idx)) / el if el > 0 else 0), flush=True)
            acc.zero_()
            window = 0
        secs = clock.now() - t0
        final_loss = epoch_sum / steps
        ips = n / secs if secs > 0 else 0.0
        print("epoch %d/%d  loss %.6f  %.1f s  %.0f img/s"
              % (epoch, args.epochs, final_loss, secs, ips), flush=True)
    correct = 0
    with torch.no_grad():
        for start in range(0, len(xte), 1000):
            x = to_device(xte[start:start + 1000].astype(np.float32) / np.float32(255), dev)
            pred = model.logits(x, False).argmax(1).cpu().numpy()
            correct += int((pred == yte[start:start + 1000]).sum())
    accuracy = correct / len(xte) if len(xte) else 0.0
    seconds = clock.now() - t_run
    print("test accuracy: %.4f  final loss: %.6f  epochs: %d  seconds: %.1f"
          % (accuracy, final_loss, args.epochs, seconds))
    print("torch cnn: img/s %.0f  test_accuracy %.4f  final_loss %.6f  epochs %d  seconds %.1f"
          "  batch %d  train_images %d  device %s" % (ips, accuracy, final_loss, args.epochs,
                                                       seconds, args.batch, n, args.device))


# ---------------------------------------------------------------- fortune transformer

def load_text(path, limit):
    """fortune-lm's load_corpus: a directory's regular files (no links, dot files, *.dat or
    *.u8) in byte-wise name order, concatenated; or one file. The first `limit` bytes (0:
    all)."""
    if os.path.isdir(path):
        names = sorted(os.fsencode(e) for e in os.listdir(path))
        files = []
        for name in names:
            if name.startswith(b".") or name.endswith(b".dat") or name.endswith(b".u8"):
                continue
            full = os.path.join(os.fsencode(path), name)
            if stat.S_ISREG(os.lstat(full).st_mode):
                files.append(full)
    else:
        files = [path]
    chunks, used = [], 0
    for f in files:
        if limit and used >= limit:
            break
        with open(f, "rb") as fh:
            b = fh.read(limit - used if limit else -1)
        chunks.append(b)
        used += len(b)
    text = b"".join(chunks)
    if not text:
        sys.exit("train_torch.py: %s: no text files found" % path)
    return np.frombuffer(text, np.uint8).astype(np.int64)


class FortuneRng:
    """fortune-lm's rng: mix64(state++) with the golden-ratio step inside mix64."""

    def __init__(self, seed):
        self.state = mix64(((seed ^ 0x5EED) + GOLDEN) & M64)

    def next(self):
        z = mix64((self.state + GOLDEN) & M64)
        self.state = (self.state + 1) & M64
        return z


def make_batch(text, lo, hi, b, t, rng, at):
    """fortune-lm's make_batch: b windows of t + 1 bytes of text[lo, hi) at offsets from rng
    (or, rng None, evenly spaced from `at`); inputs and next-byte targets [b, t]."""
    span = hi - lo - t - 1
    if rng is not None:
        offs = [lo + rng.next() % (span + 1) for _ in range(b)]
    else:
        offs = [lo + (at + i * (span // b + 1)) % (span + 1) for i in range(b)]
    win = text[np.array(offs, dtype=np.int64)[:, None] + np.arange(t + 1)]
    return np.ascontiguousarray(win[:, :t]), np.ascontiguousarray(win[:, 1:])


class GPT:
    """fortune-lm's model; linear weights in nn.Linear's [out, in] layout."""

    def __init__(self, dev, a):
        g = torch.Generator().manual_seed(a.seed)
        d, L = a.dim, a.layers
        proj_std = 0.02 / math.sqrt(2.0 * L)

        def normal(shape, std):
            return (torch.randn(shape, generator=g) * std).to(dev).requires_grad_()

        def full(n, v):
            return torch.full((n,), float(v), device=dev).requires_grad_()

        self.a = a
        self.wte, self.wpe = normal((256, d), 0.02), normal((a.context, d), 0.02)
        self.layers = [dict(ln1_w=full(d, 1), ln1_b=full(d, 0),
                            qkv_w=normal((3 * d, d), 0.02), qkv_b=full(3 * d, 0),
                            o_w=normal((d, d), proj_std), o_b=full(d, 0),
                            ln2_w=full(d, 1), ln2_b=full(d, 0),
                            fc_w=normal((4 * d, d), 0.02), fc_b=full(4 * d, 0),
                            proj_w=normal((d, 4 * d), proj_std), proj_b=full(d, 0))
                       for _ in range(L)]
        self.lnf_w, self.lnf_b = full(d, 1), full(d, 0)
        self.head = normal((256, d), 0.02)
        self.sdpa = getattr(F, "scaled_dot_product_attention", None) \
            if a.attention == "sdpa" else None

    def params(self):
        ps = [self.wte, self.wpe]
        for layer in self.layers:
            ps += list(layer.values())
        return ps + [self.lnf_w, self.lnf_b, self.head]

    def linear(self, x, w, b=None):
        if self.a.bf16:
            y = F.linear(x.to(torch.bfloat16), w.to(torch.bfloat16)).float()
            return y if b is None else y + b
        return F.linear(x, w, b)

    def attention(self, q, k, v):
        if self.sdpa is not None:
            return self.sdpa(q, k, v, is_causal=True)
        t = q.shape[-2]
        s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
        mask = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
        return torch.softmax(s.masked_fill(~mask, float("-inf")), -1) @ v

    def loss(self, idx, tgt):
        a = self.a
        b, t = idx.shape
        d, h = a.dim, a.heads
        x = F.embedding(idx, self.wte) + self.wpe[:t]
        for p in self.layers:
            y = F.layer_norm(x, (d,), p["ln1_w"], p["ln1_b"], 1e-5)
            q, k, v = (z.view(b, t, h, d // h).transpose(1, 2)
                       for z in self.linear(y, p["qkv_w"], p["qkv_b"]).split(d, dim=2))
            y = self.attention(q, k, v).transpose(1, 2).reshape(b, t, d)
            x = x + self.linear(y, p["o_w"], p["o_b"])
            y = F.layer_norm(x, (d,), p["ln2_w"], p["ln2_b"], 1e-5)
            y = F.gelu(self.linear(y, p["fc_w"], p["fc_b"]))
            x = x + self.linear(y, p["proj_w"], p["proj_b"])
        x = F.layer_norm(x, (d,), self.lnf_w, self.lnf_b, 1e-5)
        return F.cross_entropy(self.linear(x, self.head).view(b * t, 256), tgt.reshape(b * t))


def lr_at(a, step):
    """td_lr_at with fortune-lm's schedule: warmup steps/10, cosine to lr/10 over the rest."""
    warm = a.steps // 10
    if step < warm:
        return a.lr * (step + 1) / warm
    total = a.steps - warm
    k = min(step - warm, total)
    return a.lr / 10 + (a.lr - a.lr / 10) * (1 + math.cos(math.pi * k / total)) / 2


def run_lm(a):
    if a.dim % a.heads != 0:
        sys.exit("train_torch.py: --heads must divide --dim")
    dev, dev_name = setup_device(a)
    torch.manual_seed(a.seed)
    text = load_text(a.text, a.limit_bytes)
    n = len(text)
    split = n - n // 10
    if n // 10 < a.context + 2 or split < a.context + 2:
        sys.exit("train_torch.py: the corpus (%d bytes) is too short for --context %d"
                 % (n, a.context))
    model = GPT(dev, a)
    params = model.params()
    opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.99), eps=1e-8,
                            weight_decay=a.weight_decay)
    attn = "sdpa" if model.sdpa is not None else "math"
    print("torch lm: %d training / %d validation bytes from %s on %s (%s); %d layers, dim %d, "
          "%d heads, context %d (%d parameters), batch %d, adamw lr %g%s, attention %s, "
          "seed %d; pytorch %s"
          % (split, n - split, a.text, a.device, dev_name, a.layers, a.dim, a.heads, a.context,
             sum(p.numel() for p in params), a.batch, a.lr, ", bf16 matmuls" if a.bf16 else "",
             attn, a.seed, torch.__version__), flush=True)

    def evaluate():
        s = torch.zeros((), device=dev)
        with torch.no_grad():
            for k in range(4):
                x, y = make_batch(text, split, n, a.batch, a.context, None, k * 7919)
                s += model.loss(to_device(x, dev), to_device(y, dev))
        return s.item() / 4

    clock = Clock(dev)
    rng = FortuneRng(a.seed)
    t_run = clock.now()
    t_win = t_run
    timed_s, timed_steps, t_timed = 0.0, 0, None
    acc = torch.zeros((), device=dev)
    window, val = 0, float("nan")
    for step in range(a.steps):
        if step == a.warmup_steps:
            t_timed = clock.now()
        x, y = make_batch(text, 0, split, a.batch, a.context, rng, 0)
        loss = model.loss(to_device(x, dev), to_device(y, dev))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        for group in opt.param_groups:
            group["lr"] = lr_at(a, step)
        opt.step()
        acc += loss.detach()
        window += 1
        if (step + 1) % a.eval_every != 0 and step + 1 != a.steps:
            continue
        s = acc.item()
        now = time.perf_counter()
        tps = window * a.batch * a.context / (now - t_win)
        if t_timed is not None:
            timed_s += now - t_timed
            timed_steps += step + 1 - max(a.warmup_steps, step + 1 - window)
        if not math.isfinite(s):
            sys.exit("train_torch.py: the loss diverged (%g) near step %d" % (s, step + 1))
        val = evaluate()
        print("step %d/%d  train loss %.4f  val loss %.4f  bpc %.4f  %.0f tok/s"
              % (step + 1, a.steps, s / window, val, val / math.log(2), tps), flush=True)
        acc.zero_()
        window = 0
        t_win = clock.now()
        if t_timed is not None:
            t_timed = t_win
    seconds = clock.now() - t_run
    print("val loss: %.6f  bits per char: %.4f  steps: %d  seconds: %.1f"
          % (val, val / math.log(2), a.steps, seconds))
    tokens_s = timed_steps * a.batch * a.context / timed_s if timed_s > 0 else 0.0
    print("torch lm: tokens/s %.0f  timed_steps %d  timed_seconds %.3f  warmup_steps %d  "
          "val_loss %.6f  bpc %.4f  seconds %.1f  bf16 %d  attention %s  device %s"
          % (tokens_s, timed_steps, timed_s, a.warmup_steps, val, val / math.log(2), seconds,
             int(a.bf16), attn, a.device))


def main():
    ap = argparse.ArgumentParser(
        description="PyTorch eager equivalents of tensord's fashion-mnist --model cnn and "
                    "fortune-lm examples, for throughput next to tensord's.",
        epilog="Definitions of img/s and tokens/s: see the module docstring.")
    sub = ap.add_subparsers(dest="model")
    sub.required = True
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="cuda, cuda:N or cpu (default: cuda when available)")
    common.add_argument("--seed", type=int, default=1)
    common.add_argument("--tf32", action="store_true",
                        help="allow TF32 in f32 matmuls and cuDNN convolutions (off: tensord's "
                             "are full f32)")
    c = sub.add_parser("cnn", parents=[common], help="examples/fashion-mnist --model cnn")
    c.add_argument("--data", default="/usr/share/datasets/fashion-mnist",
                   help="directory with the four Fashion-MNIST idx .gz files")
    c.add_argument("--epochs", type=int, default=1)
    c.add_argument("--batch", type=int, default=128)
    c.add_argument("--lr", type=float, default=0.002)
    c.add_argument("--limit-train", type=int, default=0, help="first N training images")
    c.add_argument("--limit-test", type=int, default=0, help="first N test images")
    m = sub.add_parser("lm", parents=[common], help="examples/fortune-lm")
    m.add_argument("--text", default="/usr/share/games/fortunes",
                   help="directory of fortune files (read as fortune-lm does) or one file")
    m.add_argument("--limit-bytes", type=int, default=0)
    m.add_argument("--steps", type=int, default=300)
    m.add_argument("--batch", type=int, default=32)
    m.add_argument("--context", type=int, default=64)
    m.add_argument("--dim", type=int, default=128)
    m.add_argument("--heads", type=int, default=4)
    m.add_argument("--layers", type=int, default=2)
    m.add_argument("--lr", type=float, default=0.003)
    m.add_argument("--weight-decay", type=float, default=0.01)
    m.add_argument("--bf16", action="store_true", help="linear layers' matmuls in bf16")
    m.add_argument("--eval-every", type=int, default=50)
    m.add_argument("--warmup-steps", type=int, default=10,
                   help="steps left out of tokens/s (default 10; at most --steps - 1)")
    m.add_argument("--attention", choices=("sdpa", "math"), default="sdpa",
                   help="F.scaled_dot_product_attention (when this torch has it) or the "
                        "explicit composite")
    a = ap.parse_args()
    for name in ("epochs", "batch", "steps", "context", "dim", "heads", "layers", "eval_every"):
        if getattr(a, name, 1) < 1:
            ap.error("--%s needs a positive integer" % name.replace("_", "-"))
    if a.model == "cnn":
        run_cnn(a)
    else:
        if a.warmup_steps < 0:
            ap.error("--warmup-steps needs an integer >= 0")
        a.warmup_steps = min(a.warmup_steps, a.steps - 1)
        run_lm(a)


if __name__ == "__main__":
    main()
