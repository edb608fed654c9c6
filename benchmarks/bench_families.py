"""Benchmark: RACER against one token a step (``method="ar"``) on an ALiBi and a LongRoPE model.

No ALiBi or LongRoPE checkpoint ships in a package this project can install, so both models
are random ones built from their configs, large enough that a forward pass costs more than the
loop around it (``--hidden``, ``--layers``; weights scaled so that greedy decoding loops
instead of flipping between near-equal logits):

* ``mpt``: an MPT (ALiBi), which racer_ref decodes with chain drafts (racer_ref.exactness);
* ``phi3-longrope``: a Phi-3 with LongRoPE switching at ``--switch``, decoded with trees that
  never straddle the switch, the cache rebuilt there as Phi-3's ``generate`` does.

The prompt is repetitive (a random chunk of 16 ids, four times), as in the tasks RACER is for.
For each model: ``model.generate`` once (the oracle), then ``--rounds`` interleaved rounds of
RACER and ``ar`` (A B A B ...); it prints MAT, the faster time of each, the speedup of RACER
over ``ar`` and whether both equal ``model.generate``, with the CPU and the load average.

    .venv/bin/python benchmarks/bench_families.py
    .venv/bin/python benchmarks/bench_families.py --hidden 768 --layers 12 --max-new-tokens 128
"""

from __future__ import annotations

import argparse
import os

import torch

from racer_ref import generate
from racer_ref.speedups.cpu_kernels import cpu_name


def build(kind: str, hidden: int, layers: int, vocab: int, switch: int, positions: int) -> torch.nn.Module:
    from transformers import MptConfig, MptForCausalLM, Phi3Config, Phi3ForCausalLM

    torch.manual_seed(0)
    heads = hidden // 64
    if kind == "mpt":
        model = MptForCausalLM(MptConfig(vocab_size=vocab, d_model=hidden, n_heads=heads, n_layers=layers,
                                         max_seq_len=positions))
    else:
        half = 32  # head_dim 64: 32 factors each
        rope = dict(rope_type="longrope", rope_theta=10000.0, original_max_position_embeddings=switch,
                    short_factor=[1.0 + 0.02 * i for i in range(half)], long_factor=[1.5 + 0.1 * i for i in range(half)])
        model = Phi3ForCausalLM(Phi3Config(
            vocab_size=vocab, hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers,
            num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=positions,
            original_max_position_embeddings=switch, rope_parameters=rope, bos_token_id=None, eos_token_id=None,
            pad_token_id=0))
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() >= 2:
                param.mul_(3.0)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model.eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--switch", type=int, default=96, help="LongRoPE's original_max_position_embeddings")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    generator = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, args.vocab, (16,), generator=generator).tolist() * 4  # 64 ids
    print(f"CPU: {cpu_name()}, {torch.get_num_threads()} threads; random models, hidden {args.hidden}, "
          f"{args.layers} layers, vocab {args.vocab}; prompt {len(prompt)} ids (a chunk of 16, 4 times), "
          f"{args.max_new_tokens} new tokens, greedy, fp32")
    print(f"{'model':14s} {'mode':6s} {'MAT':>5s} {'racer s':>8s} {'ar s':>7s} {'speedup':>8s}  same as generate")
    for kind in ("mpt", "phi3-longrope"):
        model = build(kind, args.hidden, args.layers, args.vocab, args.switch, 4 * args.switch)
        ids = torch.tensor([prompt])
        with torch.no_grad():
            want = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=args.max_new_tokens,
                                  do_sample=False)[0, len(prompt):].tolist()
        generate(model, None, prompt, 8)  # warm-up; makes the model's plan
        load_before = os.getloadavg()[0]
        times = {"racer": [], "ar": []}
        same, mat = True, 0.0
        for _ in range(args.rounds):
            for method in ("racer", "ar"):
                result = generate(model, None, prompt, args.max_new_tokens, method=method)
                times[method].append(result.timings["total"])
                same = same and result.token_ids == want
                if method == "racer":
                    mat = result.mean_accepted_tokens
        racer, ar = min(times["racer"]), min(times["ar"])
        print(f"{kind:14s} {model.racer_plan.mode:6s} {mat:5.2f} {racer:8.3f} {ar:7.3f} {ar / racer:7.2f}x  "
              f"{'yes' if same else 'NO'}   (load {load_before:.2f} -> {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
