#!/usr/bin/python3
"""The train_fashion protocol in PyTorch, as the reference its numbers are
compared with: the same MLP and MLP-Mixer, pixels standardized by the training
set's mean and deviation, AdamW (weight decay 1e-2 on the weight matrices,
none on biases and LayerNorm weights), a per-step linear warm-up
from 0 then cosine decay to 0, cross-entropy with label smoothing, shuffled
mini-batches, optionally random horizontal flips of the training images
(--augment flip: each image mirrored with probability 1/2, drawn from torch's
generator, so the coins differ from train_fashion's but not their law). Prints one line per epoch and, with --step-time, the median time
of one training step instead of training.

    /usr/bin/python3 demos/train_fashion/reference_torch.py --model mixer --epochs 10
"""
import argparse, gzip, math, os, statistics, struct, time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def load_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims)


class Mlp(nn.Module):
    def __init__(self, hidden, p):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(784, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, 10)
        self.p = p

    def forward(self, x):
        x = F.dropout(F.gelu(self.fc1(x)), self.p, self.training)
        x = F.dropout(F.gelu(self.fc2(x)), self.p, self.training)
        return self.fc3(x)


def ffn(d, h):
    return nn.Sequential(nn.Linear(d, h), nn.GELU(), nn.Linear(h, d))


class Block(nn.Module):
    def __init__(self, tokens, width, token_hidden, channel_hidden):
        super().__init__()
        self.token_norm, self.token_mlp = nn.LayerNorm(width), ffn(tokens, token_hidden)
        self.channel_norm, self.channel_mlp = nn.LayerNorm(width), ffn(width, channel_hidden)

    def forward(self, x):
        x = x + self.token_mlp(self.token_norm(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channel_mlp(self.channel_norm(x))


class Mixer(nn.Module):
    def __init__(self, patch, width, blocks, token_hidden, channel_hidden):
        super().__init__()
        self.patch, self.grid = patch, 28 // patch
        self.embed = nn.Linear(patch * patch, width)
        self.blocks = nn.Sequential(*[Block(self.grid ** 2, width, token_hidden, channel_hidden) for _ in range(blocks)])
        self.final_norm, self.head = nn.LayerNorm(width), nn.Linear(width, 10)

    def forward(self, x):
        n, g, p = x.shape[0], self.grid, self.patch
        x = x.reshape(n, g, p, g, p).permute(0, 1, 3, 2, 4).reshape(n, g * g, p * p)
        return self.head(self.final_norm(self.blocks(self.embed(x))).mean(1))


def main():
    a = argparse.ArgumentParser()
    a.add_argument("--model", default="mlp", choices=["mlp", "mixer"])
    a.add_argument("--epochs", type=int, default=10)
    a.add_argument("--batch-size", type=int, default=128)
    a.add_argument("--lr", type=float, default=1e-3)
    a.add_argument("--warmup-epochs", type=float, default=1.0)
    a.add_argument("--label-smoothing", type=float, default=0.1)
    a.add_argument("--dropout", type=float, default=0.1)
    a.add_argument("--augment", default="none", choices=["none", "flip"])
    a.add_argument("--width", type=int, default=128)
    a.add_argument("--blocks", type=int, default=4)
    a.add_argument("--token-hidden", type=int, default=64)
    a.add_argument("--channel-hidden", type=int, default=256)
    a.add_argument("--threads", type=int, default=2)
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--train-limit", type=int, default=0)
    a.add_argument("--test-limit", type=int, default=0)
    a.add_argument("--step-time", type=int, default=0, help="time this many steps instead of training")
    a.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    o = a.parse_args()
    torch.set_num_threads(o.threads)
    torch.manual_seed(o.seed)
    d = o.data_dir
    x_train = load_idx(os.path.join(d, "train-images-idx3-ubyte.gz"))[: o.train_limit or None]
    y_train = load_idx(os.path.join(d, "train-labels-idx1-ubyte.gz"))[: o.train_limit or None]
    x_test = load_idx(os.path.join(d, "t10k-images-idx3-ubyte.gz"))[: o.test_limit or None]
    y_test = load_idx(os.path.join(d, "t10k-labels-idx1-ubyte.gz"))[: o.test_limit or None]
    scaled = x_train.astype(np.float64) / 255.0
    mean, std = scaled.mean(), scaled.std()
    prep = lambda x: torch.tensor(((x.reshape(len(x), 784) / 255.0 - mean) / std).astype(np.float32))
    x_train, x_test = prep(x_train), prep(x_test)
    y_train, y_test = torch.tensor(y_train.astype(np.int64)), torch.tensor(y_test.astype(np.int64))
    model = (Mlp(256, o.dropout) if o.model == "mlp"
             else Mixer(4, o.width, o.blocks, o.token_hidden, o.channel_hidden))
    print(f"{o.model}: {sum(p.numel() for p in model.parameters())} parameters")
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 1e-2},
                             {"params": no_decay, "weight_decay": 0.0}], lr=o.lr)
    n = len(y_train)
    steps_per_epoch = math.ceil(n / o.batch_size)
    total = steps_per_epoch * o.epochs
    warmup = min(round(o.warmup_epochs * steps_per_epoch), total // 2)
    cosine = max(1, total - warmup)
    lr_at = lambda t: t / warmup if t < warmup else 0.5 * (1 + math.cos(math.pi * min(t - warmup, cosine) / cosine))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)

    def step(xb, yb):
        loss = F.cross_entropy(model(xb), yb, label_smoothing=o.label_smoothing)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        return loss.item()

    if o.step_time:
        model.train()
        xb, yb = x_train[: o.batch_size], y_train[: o.batch_size]
        times = []
        for _ in range(o.step_time):
            start = time.perf_counter()
            step(xb, yb)
            times.append(time.perf_counter() - start)
        print(f"median step {statistics.median(times) * 1000:.1f} ms over {o.step_time} steps")
        return
    for epoch in range(o.epochs):
        model.train()
        start, losses = time.perf_counter(), []
        for idx in torch.randperm(n).split(o.batch_size):
            xb = x_train[idx]
            if o.augment == "flip":
                mirror = torch.rand(len(idx)) < 0.5
                images = xb.reshape(-1, 28, 28)
                xb = torch.where(mirror[:, None, None], images.flip(2), images).reshape(-1, 784)
            losses.append(step(xb, y_train[idx]))
        seconds = time.perf_counter() - start
        model.eval()
        with torch.no_grad():
            accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
        print(f"epoch {epoch + 1} train loss {np.mean(losses):.4f} test accuracy {accuracy:.4f} ({seconds:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
