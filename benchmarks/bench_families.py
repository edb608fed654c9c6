"""Benchmark: RACER against one token a step (``method="ar"``) on a LongRoPE and an ALiBi model.

* ``phi3-longrope``: the default model's weights (SmolLM2-135M-Instruct) in a Phi-3 with
  LongRoPE (``Phi3ForCausalLM``, whose ``generate`` rebuilds the cache at the switch): short
  factors 1.0 (below ``--switch`` the model is SmolLM2 itself, checked on the prompt's
  logits), long factors from 1.0 to 2.0 past it, attention factor 1.0. The chat prompt asks
  to fix the typos of a passage (the demo's kind of task) and is long enough that decoding
  crosses the switch: racer_ref decodes it with trees that never straddle the switch.
* ``mpt``: no ALiBi checkpoint ships in a package this project can install, so a random MPT
  (``--hidden``, ``--layers``, vocabulary 2048, weights scaled by 3 so that greedy decoding
  loops instead of flipping between near-equal logits), on a prompt of a random chunk of 16
  ids four times; racer_ref decodes it with chain drafts.

For each model: ``model.generate`` once (the oracle), a warm-up, then ``--rounds``
interleaved rounds of RACER and ``ar`` (A B A B ...); it prints the plan, MAT, the faster
time of each, RACER's speedup over ``ar``, whether both equal ``model.generate``, the CPU and
the load average.

    .venv/bin/python benchmarks/bench_families.py
    .venv/bin/python benchmarks/bench_families.py --rounds 3 --max-new-tokens 128
"""

from __future__ import annotations

import argparse
import os

import torch

from racer_ref import generate
from racer_ref.harness.models import load_default_model
from racer_ref.speedups.cpu_kernels import cpu_name

PASSAGE = ("Pleese fix the typos in this pasage and give back the whole text: The comittee met on "
           "Tuesday to discus the new budjet. Most members agred that the librry needs more funds, "
           "but the treasurer warned that the town can not aford a new roof and new books in the same "
           "year. The vote was postponed untill next month.")


def phi3_longrope(switch: int):
    """The default model in a ``Phi3ForCausalLM`` with LongRoPE switching at ``switch``."""
    from transformers import Phi3Config, Phi3ForCausalLM

    base, tokenizer = load_default_model()
    c = base.config
    half = c.head_dim // 2
    rope = dict(rope_type="longrope", rope_theta=c.rope_parameters["rope_theta"], attention_factor=1.0,
                short_factor=[1.0] * half, long_factor=[1.0 + i / (half - 1) for i in range(half)],
                original_max_position_embeddings=switch)
    config = Phi3Config(vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
                        num_hidden_layers=c.num_hidden_layers, num_attention_heads=c.num_attention_heads,
                        num_key_value_heads=c.num_key_value_heads, max_position_embeddings=c.max_position_embeddings,
                        original_max_position_embeddings=switch, rope_parameters=rope, rms_norm_eps=c.rms_norm_eps,
                        tie_word_embeddings=True, bos_token_id=c.bos_token_id, eos_token_id=c.eos_token_id,
                        pad_token_id=c.pad_token_id, sliding_window=None)
    model = Phi3ForCausalLM(config).eval()
    state = {}
    for name, value in base.state_dict().items():
        state[name] = value
    for i in range(c.num_hidden_layers):
        p = f"model.layers.{i}."
        state[p + "self_attn.qkv_proj.weight"] = torch.cat([state.pop(p + f"self_attn.{x}_proj.weight")
                                                            for x in "qkv"])
        state[p + "mlp.gate_up_proj.weight"] = torch.cat([state.pop(p + "mlp.gate_proj.weight"),
                                                          state.pop(p + "mlp.up_proj.weight")])
    model.load_state_dict(state, strict=False)
    model.tie_weights()
    model.generation_config = base.generation_config
    return model, tokenizer, base


def random_mpt(hidden: int, layers: int, vocab: int = 2048):
    from transformers import MptConfig, MptForCausalLM

    torch.manual_seed(0)
    model = MptForCausalLM(MptConfig(vocab_size=vocab, d_model=hidden, n_heads=hidden // 64, n_layers=layers,
                                     max_seq_len=1024)).eval()
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() >= 2:
                param.mul_(3.0)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def run(name: str, model, prompt, max_new_tokens: int, rounds: int) -> None:
    ids = torch.tensor([prompt])
    with torch.no_grad():
        want = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                              do_sample=False)[0, len(prompt):].tolist()
    generate(model, None, prompt, 8)  # warm-up; makes the model's plan
    load_before = os.getloadavg()[0]
    times = {"racer": [], "ar": []}
    same, mat, new = True, 0.0, 0
    for _ in range(rounds):
        for method in ("racer", "ar"):
            result = generate(model, None, prompt, max_new_tokens, method=method)
            times[method].append(result.timings["total"])
            same = same and result.token_ids == want
            if method == "racer":
                mat, new = result.mean_accepted_tokens, len(result.token_ids)
    racer, ar = min(times["racer"]), min(times["ar"])
    plan = model.racer_plan
    print(f"{name:14s} {plan.mode:5s} {len(prompt):4d} {new:4d} {mat:5.2f} {racer:8.3f} {ar:7.3f} {ar / racer:7.2f}x  "
          f"{'yes' if same else 'NO':3s}  switch {plan.switch or '-'}, load {load_before:.2f} -> {os.getloadavg()[0]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--switch", type=int, default=128, help="LongRoPE's original_max_position_embeddings")
    parser.add_argument("--hidden", type=int, default=512, help="the random MPT's width")
    parser.add_argument("--layers", type=int, default=8, help="the random MPT's depth")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print(f"CPU: {cpu_name()}, {torch.get_num_threads()} threads; greedy, fp32, stock kernels, "
          f"{args.max_new_tokens} new tokens at most; faster of {args.rounds} interleaved runs")
    print(f"{'model':14s} {'mode':5s} {'P':>4s} {'new':>4s} {'MAT':>5s} {'racer s':>8s} {'ar s':>7s} "
          f"{'speedup':>8s}  same as model.generate")
    model, tokenizer, base = phi3_longrope(args.switch)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": PASSAGE}], add_generation_prompt=True)
    prompt = list(prompt["input_ids"] if hasattr(prompt, "keys") else prompt)
    with torch.no_grad():  # below the switch the clone is the default model itself
        ids = torch.tensor([prompt[:args.switch]])
        gap = (model(ids).logits - base(ids).logits).abs().max().item()
    assert gap < 1e-3, f"the Phi-3 clone's logits differ from the default model's by {gap}"
    del base
    run("phi3-longrope", model, prompt, args.max_new_tokens, args.rounds)
    del model
    generator = torch.Generator().manual_seed(1)
    run("mpt (random)", random_mpt(args.hidden, args.layers),
        torch.randint(0, 2048, (16,), generator=generator).tolist() * 4, args.max_new_tokens, args.rounds)


if __name__ == "__main__":
    main()
