"""Tutorial 7: the verification loop on a tiny model, checked against greedy decoding.

**What you will learn**

* the loop's logic first, on a toy target in numpy: draft, verify every node, accept the
  longest path that agrees with the target, update the drafter;
* the whole RACER decoding loop in twenty lines: prefill, draft, verify in one forward
  pass, accept, keep the accepted path in the KV cache, update the drafter;
* what the target model sees in a verify pass (tree attention mask, position ids) and how
  the KV cache is compacted afterwards;
* why the output is exactly what greedy decoding gives: we check it token for token against
  `model.generate(do_sample=False)`;
* how `racer_ref.generate` packages the same loop, for every drafting method.

The model is a tiny random Llama built from a config (nothing to download), so this runs in
seconds on a CPU. Run it with `python tutorials/07_verification_loop.py`. With numpy only
(no torch), the toy loop runs and the rest says it is skipped.
"""

# --8<-- [start:toy]
import numpy as np

from racer_ref import Drafter

# First the loop's logic alone, with a toy target in numpy: its logits depend on the last
# two tokens only (a random table), and its greedy output is the argmax. A verify pass
# gives every tree node the logits of "committed context + the path from the root to the
# node"; acceptance follows, from the root, the child that carries the argmax.
V, K, N = 12, 4, 40
table = np.random.default_rng(0).standard_normal((V, V, V))


def toy_logits(context):
    return table[context[-2] if len(context) > 1 else 0, context[-1]]  # (V,)


def path_to(tree, node):
    """The tokens from the root to ``node`` (inclusive), read up the parents."""
    path = []
    while node >= 0:
        path.append(int(tree.tokens[node]))
        node = int(tree.parents[node])
    return path[::-1]


prompt = [3, 1, 4, 1, 5, 9, 2, 6]
greedy = list(prompt)
for _ in range(N):
    greedy.append(int(toy_logits(greedy).argmax()))
greedy = greedy[len(prompt):]

drafter = Drafter(method="racer", vocab_size=V, capacity=8, breadth=K, backend="python", tree="paper")
rows = np.stack([toy_logits(prompt[:i + 1]) for i in range(len(prompt))])  # prefill: (P, V)
drafter.observe(prompt, np.argsort(-rows, axis=1)[:, :K])
drafter.commit(prompt)
committed, root, output, passes = list(prompt), int(rows[-1].argmax()), [], 0
output.append(root)
while len(output) < N:
    tree = drafter.draft(root)
    rows = np.stack([toy_logits(committed + path_to(tree, i)) for i in range(len(tree))])
    node, accepted = 0, [0]
    while len(output) + len(accepted) < N:  # accepting a drafts emits a + 1 tokens
        match = [c for c in range(len(tree)) if tree.parents[c] == node and tree.tokens[c] == rows[node].argmax()]
        if not match:
            break
        node = match[0]
        accepted.append(node)
    block = [int(tree.tokens[i]) for i in accepted]  # the root + the accepted drafts
    root = int(rows[node].argmax())                 # the target's token after them
    output += block[1:] + [root]
    committed += block
    drafter.observe(tree.tokens, np.argsort(-rows, axis=1)[:, :K])  # every node's top-k
    drafter.commit(block)
    passes += 1
print("── 1. The loop on a toy target in numpy (logits from the last two tokens)")
print(f"  {N} tokens in {passes} verify passes; identical to the toy's greedy output: {output == greedy}")
assert output == greedy
# --8<-- [end:toy]

# --8<-- [start:model]
try:  # the hf extra: pip install 'racer-ref[hf]'
    import torch
    from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM
except ImportError:  # numpy only: the toy loop above is what this tutorial can run
    print("\n  torch and transformers not installed: skipping the tiny Llama (sections 2-5); "
          "pip install 'racer-ref[hf]' installs them")
    raise SystemExit(0)

from racer_ref import generate
from racer_ref.decoding import clip_draft_tree
from racer_ref.metrics import mean_accepted_tokens
from racer_ref.verify import accept_greedy, forward_prompt, forward_tree, keep_accepted

torch.set_num_threads(2)

# A 2-layer Llama with a 64-token vocabulary and random weights (scaled up, so that its
# greedy output is decisive rather than a tie-break between near-equal logits). A random
# model soon repeats itself, which gives the drafter something to find.
torch.manual_seed(0)
config = LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                     bos_token_id=None, eos_token_id=None, pad_token_id=None)
model = LlamaForCausalLM(config).eval()
with torch.no_grad():
    for param in model.parameters():
        if param.dim() >= 2:
            param.mul_(3.0)
prompt = [3, 14, 15, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6]
N = 60  # new tokens (the toy above used 40)

# The reference: plain greedy decoding by transformers, one forward pass per token.
with torch.no_grad():
    greedy = model.generate(torch.tensor([prompt]), max_new_tokens=N, do_sample=False,
                            attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                            pad_token_id=0)[0, len(prompt):].tolist()
print("\n── 2. A tiny random Llama (2 layers, vocabulary 64)")
print(f"  prompt ({len(prompt)} tokens):", prompt)
print(f"  greedy output ({N} tokens, {N} forward passes):", greedy)
# --8<-- [end:model]

# --8<-- [start:loop]
# The loop, written out. `racer_ref.verify` holds the three tensor steps (one forward pass
# over the tree, greedy acceptance, KV compaction); the drafter is racer_ref.Drafter.
K = 4
drafter = Drafter(method="racer", vocab_size=64, capacity=16, breadth=K, tree="paper")
cache = DynamicCache(config=model.config)
print("\n── 3. The RACER loop, step by step")
with torch.no_grad():
    # Prefill: the prompt fills the cache; its last row of logits gives the first root.
    logits = forward_prompt(model, cache, torch.tensor(prompt))        # (P, vocab)
    root = int(logits[-1].argmax())
    drafter.observe(prompt, logits.topk(K, dim=-1).indices.numpy())   # copy-logit rows
    drafter.commit(prompt)                                              # automaton
    output = [root]
    accepted_lengths = []  # a per verify pass
    while len(output) < N:
        tree = drafter.draft(root)                      # n nodes, root first (BFS order)
        # Accepting a drafts emits a + 1 tokens: drop nodes too deep to fit in N tokens.
        tree = clip_draft_tree(tree, max_depth=N - len(output) - 1)
        L = cache.get_seq_length()                      # tokens in the KV cache
        logits = forward_tree(model, cache, tree)       # (n, vocab): mask + positions L + depth
        accepted, next_root = accept_greedy(logits, tree)
        keep_accepted(cache, L, accepted)               # keep root + accepted, consecutively
        block = tree.tokens[accepted].tolist()          # root + accepted drafts: now cached
        output += block[1:] + [next_root]
        drafter.observe(tree.tokens, logits.topk(K, dim=-1).indices.numpy())  # every node
        drafter.commit(block)
        # The cache holds the prompt and every output token but the newest (the next root).
        assert cache.get_seq_length() == len(prompt) + len(output) - 1
        accepted_lengths.append(len(accepted) - 1)
        step = len(accepted_lengths)
        if step <= 6 or len(output) >= N:
            print(f"  step {step:2}: root {root:2}, tree of {len(tree):2} nodes, "
                  f"accepted {block[1:]} (a = {len(accepted) - 1}), next root {next_root}")
        elif step == 7:
            print("  ...")
        root = next_root
# Where the N tokens came from: the prefill's last row predicted the first one (the first
# root) for free; every verify pass then emitted a + 1 (its accepted drafts + a new root).
passes = len(accepted_lengths)
from_passes = sum(a + 1 for a in accepted_lengths)
assert len(output) == 1 + from_passes
mat = mean_accepted_tokens(accepted_lengths)  # MAT: the mean of a + 1 over the verify passes
assert mat == from_passes / passes
print(f"  {len(output)} tokens = 1 predicted by the prefill + {from_passes} from {passes} verify passes")
print(f"  MAT = {from_passes} / {passes} = {mat:.2f} tokens per verify pass (plain decoding: 1.00)")
# --8<-- [end:loop]

# --8<-- [start:check]
# Lossless: the same tokens as greedy decoding, one for one.
print("\n── 4. Check against model.generate(do_sample=False)")
print("  identical to greedy:", output == greedy)
assert output == greedy
# --8<-- [end:check]

# --8<-- [start:generate]
# racer_ref.generate runs the same loop (plus stopping rules, sampling, timings) for any
# drafting method. Each must reproduce greedy decoding; they differ in passes needed.
print("\n── 5. racer_ref.generate, every method, capacity 16")
for method in ("ar", "pld", "retrieval", "logits", "logits-last", "racer"):
    tree_settings = {} if method == "ar" else dict(capacity=16, breadth=K)  # "ar" drafts no tree
    result = generate(model, None, prompt, max_new_tokens=N, method=method, **tree_settings)
    same = result.token_ids == greedy
    print(f"  {method:12} identical to greedy: {same}   verify passes: {result.steps:2}   "
          f"MAT: {result.mean_accepted_tokens:.2f}")
    assert same
# --8<-- [end:generate]
