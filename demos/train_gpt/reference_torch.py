#!/usr/bin/python3
"""The train_gpt protocol in PyTorch 1.13, as the reference its numbers are
compared with: the same corpus (every plain file of the fortunes directory in
name order, records split at lines holding only "%", empty ones dropped, record
i held out when i % 10 == 9, each record followed by "\\n%\\n"), the same
character vocabulary and unigram baseline, the same training windows (row r of
step s starts at a SplitMix64 hash of (seed, s, r), as batches.cpp), the same
GPT-2 style model (learned positions, pre-LayerNorm blocks, causal attention,
gelu_tanh FFN of 4 n_embd, final LayerNorm, lm_head tied to the token
embedding; nanoGPT's initialization: N(0, 0.02), the residual projections
N(0, 0.02 / sqrt(2 n_layer)), zero biases), AdamW with weight decay on the
parameters of rank >= 2 only, betas (0.9, beta2), linear warm-up from 0 then
cosine decay to min_lr_ratio * lr, the gradients' 2-norm clipped, and the same
evaluations (the periodic one on evenly spread windows, the final one on the
whole validation text). The initial weights differ from train_gpt's (torch's
generator), so the curves agree in law, not bit for bit. Prints one line per
evaluation and a sample at the end; with --step-time, the median time of one
training step instead of training.

    /usr/bin/python3 demos/train_gpt/reference_torch.py --steps 2000
"""
import argparse, math, os, statistics, time

import torch
import torch.nn as nn
import torch.nn.functional as F

MASK = (1 << 64) - 1


def mix(z):
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & MASK
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & MASK
    return z ^ (z >> 31)


def window_start(seed, step, row, length, block):
    key = mix((mix((mix(seed ^ 0x77696e646f77) + step) & MASK) + row) & MASK)
    return key % (length - block)


def split_records(text):
    records, lines = [], []
    for line in text.split("\n") + ["%"]:
        if line == "%":
            if lines and any(l.strip(" \t\r") for l in lines):
                records.append("\n".join(lines))
            lines = []
        else:
            lines.append(line)
    return records


def load_corpus(directory):
    files = sorted(f for f in os.listdir(directory)
                   if os.path.isfile(os.path.join(directory, f)) and not os.path.islink(os.path.join(directory, f))
                   and not f.endswith((".dat", ".u8")))
    train, validation, index = [], [], 0
    for name in files:
        with open(os.path.join(directory, name), "rb") as f:
            text = f.read().decode("utf-8")
        # A trailing line break does not start another (empty) line.
        if text.endswith("\n"):
            text = text[:-1]
        for record in split_records(text):
            (validation if index % 10 == 9 else train).append(record + "\n%\n")
            index += 1
    return "".join(train), "".join(validation)


class Block(nn.Module):
    def __init__(self, c, heads, p):
        super().__init__()
        self.heads, self.p = heads, p
        self.ln_1, self.ln_2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.c_attn, self.attn_proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.c_fc, self.mlp_proj = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.heads)
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        weights = F.dropout(scores.masked_fill(~causal, float("-inf")).softmax(-1), self.p, self.training)
        y = (weights @ v).transpose(1, 2).reshape(b, t, c)
        x = x + F.dropout(self.attn_proj(y), self.p, self.training)
        h = self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))
        return x + F.dropout(h, self.p, self.training)


class GPT(nn.Module):
    def __init__(self, vocab, block, layers, heads, c, p):
        super().__init__()
        self.block, self.p = block, p
        self.wte, self.wpe = nn.Embedding(vocab, c), nn.Embedding(block, c)
        self.h = nn.ModuleList(Block(c, heads, p) for _ in range(layers))
        self.ln_f = nn.LayerNorm(c)
        for name, w in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(w)
            elif w.dim() >= 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(w, 0.0, std)

    def forward(self, idx):
        t = idx.shape[1]
        x = F.dropout(self.wte(idx) + self.wpe(torch.arange(t)), self.p, self.training)
        for block in self.h:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()  # lm_head tied to wte

    @torch.no_grad()
    def generate(self, ids, n, temperature, generator):
        for _ in range(n):
            logits = self(ids[:, -self.block:])[:, -1]
            if temperature == 0:
                nxt = logits.argmax(-1, keepdim=True)
            else:
                nxt = torch.multinomial((logits / temperature).softmax(-1), 1, generator=generator)
            ids = torch.cat([ids, nxt], 1)
        return ids


def main():
    a = argparse.ArgumentParser()
    a.add_argument("--n-layer", type=int, default=4)
    a.add_argument("--n-head", type=int, default=4)
    a.add_argument("--n-embd", type=int, default=96)
    a.add_argument("--block-size", type=int, default=64)
    a.add_argument("--dropout", type=float, default=0.0)
    a.add_argument("--steps", type=int, default=1500)
    a.add_argument("--batch-size", type=int, default=32)
    a.add_argument("--lr", type=float, default=3e-3)
    a.add_argument("--min-lr-ratio", type=float, default=0.1)
    a.add_argument("--warmup-steps", type=int, default=100)
    a.add_argument("--weight-decay", type=float, default=0.1)
    a.add_argument("--beta2", type=float, default=0.99)
    a.add_argument("--grad-clip", type=float, default=1.0)
    a.add_argument("--eval-interval", type=int, default=250)
    a.add_argument("--eval-windows", type=int, default=128)
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--threads", type=int, default=2)
    a.add_argument("--step-time", type=int, default=0, help="time this many steps instead of training")
    a.add_argument("--data-dir", default="/usr/share/games/fortunes")
    o = a.parse_args()
    torch.set_num_threads(o.threads)
    torch.manual_seed(o.seed)
    train_text, val_text = load_corpus(o.data_dir)
    chars = sorted(set(train_text) | set(val_text))
    index = {c: i for i, c in enumerate(chars)}
    train = torch.tensor([index[c] for c in train_text])
    val = torch.tensor([index[c] for c in val_text])
    counts = torch.bincount(train, minlength=len(chars)).double() + 1.0  # add-one smoothing
    unigram = -(counts / counts.sum()).log()[val[1:]].mean().item()
    T, B = o.block_size, o.batch_size
    model = GPT(len(chars), T, o.n_layer, o.n_head, o.n_embd, o.dropout)
    print(f"{len(train)} training and {len(val)} validation characters, {len(chars)} distinct; "
          f"{sum(p.numel() for p in model.parameters())} parameters; unigram baseline {unigram:.4f}")
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": o.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=o.lr, betas=(0.9, o.beta2))
    warmup = min(o.warmup_steps, o.steps // 2)
    cosine = max(1, o.steps - warmup)
    floor = o.min_lr_ratio

    def lr_at(t):
        if t < warmup:
            return t / warmup
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(t - warmup, cosine) / cosine))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    # Evaluation windows: start w * T, T + 1 characters, the last one shorter.
    windows = [(s, min(T, len(val) - 1 - s)) for s in range(0, len(val) - 1, T)]
    full_length = [w for w in windows if w[1] == T]
    subset = (full_length if o.eval_windows == 0 or o.eval_windows >= len(full_length)
              else [full_length[k * len(full_length) // o.eval_windows] for k in range(o.eval_windows)])

    @torch.no_grad()
    def evaluate(which):
        model.eval()
        total, count = 0.0, 0
        for i in range(0, len(which), 32):
            for t in sorted({t for _, t in which[i:i + 32]}):  # one length per batch
                x = torch.stack([val[s:s + t + 1] for s, u in which[i:i + 32] if u == t])
                logits = model(x[:, :-1]).reshape(-1, len(chars)).double()
                total += F.cross_entropy(logits, x[:, 1:].reshape(-1), reduction="sum").item()
                count += x.shape[0] * t
        model.train()
        return total / count

    def batch(step):
        starts = [window_start(o.seed, step, r, len(train), T) for r in range(B)]
        rows = torch.stack([train[s:s + T + 1] for s in starts])
        return rows[:, :-1], rows[:, 1:]

    def train_step(step):
        x, y = batch(step)
        loss = F.cross_entropy(model(x).reshape(-1, len(chars)), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), o.grad_clip)
        opt.step()
        sched.step()
        return loss.item()

    if o.step_time:
        times = []
        for step in range(o.step_time):
            start = time.perf_counter()
            train_step(step)
            times.append(time.perf_counter() - start)
        median = statistics.median(times)
        print(f"median step {median * 1000:.1f} ms over {o.step_time} steps, {B * T / median:.0f} tokens/s")
        return
    start, losses = time.perf_counter(), []
    for step in range(o.steps):
        losses.append(train_step(step))
        if (step + 1) % o.eval_interval == 0 or step + 1 == o.steps:
            print(f"step {step + 1}: train loss {sum(losses) / len(losses):.4f} val loss {evaluate(subset):.4f} "
                  f"({time.perf_counter() - start:.0f} s)", flush=True)
            losses = []
    print(f"final validation loss {evaluate(windows):.4f} (unigram baseline {unigram:.4f})")
    g = torch.Generator().manual_seed(o.seed)
    ids = model.generate(torch.tensor([[index["%"], index["\n"]]]), 300, 0.8, g)[0]
    print("".join(chars[i] for i in ids))


if __name__ == "__main__":
    main()
