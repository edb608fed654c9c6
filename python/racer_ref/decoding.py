"""``generate()``: lossless RACER decoding of one prompt on a Hugging Face causal LM.

The loop (docs/explanation/spec.md, "One decoding step"): prefill the prompt and pick the
first root; then, until a stopping rule fires, ask the drafter for a draft tree rooted at
the root, verify it in one forward pass (:mod:`racer_ref.verify`), emit the accepted drafts
plus the next root, update the drafter (copy-logit table from the verified logits,
automaton from the committed tokens) and keep only the accepted path in the KV cache.

With ``temperature=0`` the output equals ``model.generate(do_sample=False)`` token for token;
with ``temperature > 0`` it has the distribution of plain sampling (spec, "Sampling"). Every
argument is checked once, before any work, by :func:`racer_ref.options.resolve`, which also
plugs in what the loop does not need to know (the KV cache, the drafting, logits
processors). Batch size 1 only.
"""

from __future__ import annotations

import inspect
import time
from typing import Any, List, Optional, Sequence

import numpy as np
import torch

from racer_ref.metrics import TIMING_KEYS, GenerationResult
from racer_ref.options import OPTIONS, Options, resolve
from racer_ref.sampling import sample, target_probs
from racer_ref.tree import accept_greedy, clip_draft_tree
from racer_ref.verify import accept_sampling, argmax_from_topk, forward_prompt, keep_accepted


class StopStrings:
    """Finds the first token at which the generated text contains one of the stop strings.

    The text is the one that reads after the prompt: each check decodes the tail of the
    output *with a few tokens before it* and keeps what follows their text. Decoded alone,
    the first token of a SentencePiece-style tokenizer (Llama-2, Mistral, Gemma) loses its
    leading space, so a stop string such as ``" any"`` would be missed as the first word.

    The tail is long enough to hold the longest stop string ending inside the newest
    token's text: it starts at ``2 * longest + 4`` tokens and doubles while its text
    (without the broken character a cut through a multi-byte character leaves at its start)
    is too short. One character can take several byte-level tokens (an emoji four), so a
    window in tokens alone can miss a stop string; this one is measured in characters, and
    its cost does not grow with the output.
    """

    #: Tokens decoded before the tail, whose text is then cut off.
    CONTEXT = 4

    def __init__(self, tokenizer: Any, stop: Sequence[str], prompt_ids: Sequence[int]) -> None:
        self.tokenizer, self.stop = tokenizer, list(stop)
        self.longest = max(len(s) for s in self.stop)
        self.prompt_tail = list(prompt_ids)[-self.CONTEXT:]

    def text(self, output: List[int], window: int) -> str:
        """The text of the last ``window`` tokens of ``output`` as it reads after what precedes them."""
        start = max(len(output) - window, 0)
        context = (self.prompt_tail + output[max(start - self.CONTEXT, 0):start])[-self.CONTEXT:]
        head, whole = self.tokenizer.decode(context), self.tokenizer.decode(context + output[start:])
        # A context that ends inside a multi-byte character reads differently alone: decode the tail alone.
        return whole[len(head):] if whole.startswith(head) else self.tokenizer.decode(output[start:])

    def hit(self, output: List[int]) -> bool:
        """True if a stop string ends in the text of the last token of ``output``."""
        # The tail must hold the newest token's text and the longest - 1 characters before it.
        need = self.longest + len(self.text(output, 1).strip("\ufffd"))
        window = 2 * self.longest + 4
        while True:
            text = self.text(output, window)
            if window >= len(output) or len(text.lstrip("\ufffd")) >= need:
                return any(s in text for s in self.stop)
            window *= 2


class _Output:
    """The new tokens, the stopping rules and the streaming of each committed block."""

    def __init__(self, opts: Options, tokenizer: Any) -> None:
        self.opts, self.device = opts, opts.device
        self.stops = None if opts.stops is None else StopStrings(tokenizer, opts.stops, opts.prompt_ids.tolist())
        self.token_ids: List[int] = []
        self.stop_reason: Optional[str] = None  # set by the first stopping rule that fires

    def emit(self, block: List[int], scores: Optional[torch.Tensor] = None) -> int:
        """Append a block of new tokens, cut at the first stopping rule; return how many
        were kept (``stop_reason`` says whether a rule fired). ``scores``:
        ``(len(block), vocab)``, the scores that chose each token (read by
        ``stopping_criteria`` only)."""
        opts, output = self.opts, self.token_ids
        for n_kept, token in enumerate(block, start=1):
            output.append(token)
            criteria_hit = opts.stopping_criteria is not None and self._criteria_hit(scores[n_kept - 1:n_kept])
            if token in opts.eos:
                self.stop_reason = "eos"
            elif self.stops is not None and self.stops.hit(output):
                self.stop_reason = "stop_string"
            elif criteria_hit:
                self.stop_reason = "stopping_criteria"
            elif len(output) >= opts.max_new_tokens:
                self.stop_reason = "max_new_tokens"
            if self.stop_reason is not None:
                block = block[:n_kept]
                break
        if opts.streamer is not None:
            opts.streamer.put(torch.tensor(block))
        if opts.callback is not None:
            opts.callback(list(block))
        return len(block)

    def _criteria_hit(self, row: torch.Tensor) -> bool:
        """Ask transformers-style stopping criteria about prompt + new tokens; ``row`` ``(1, vocab)``."""
        ids = torch.tensor([self.opts.prompt_ids.tolist() + self.token_ids], device=self.device)  # (1, P + N)
        hit = self.opts.stopping_criteria(ids, row)
        return bool(hit.any()) if isinstance(hit, torch.Tensor) else bool(hit)


class _Clock:
    """Adds the wall time since the previous lap to one of :data:`TIMING_KEYS`."""

    def __init__(self, model: Any) -> None:
        self.timings = dict.fromkeys(TIMING_KEYS, 0.0)
        # GPU work is asynchronous: a lap that ends with target work waits for it first.
        self.sync = torch.cuda.synchronize if model.device.type == "cuda" else (lambda: None)
        self.started = self.last = time.perf_counter()

    def lap(self, key: str, sync: bool = False) -> None:
        if sync:
            self.sync()
        now = time.perf_counter()
        self.timings[key] += now - self.last
        self.last = now


def generate(model: Any, tokenizer: Any = None, prompt: Any = None, max_new_tokens: int = 128,
             **options: Any) -> GenerationResult:
    """Decode one prompt with RACER (or another drafter) and the target's verification.

    ``model`` is a transformers causal LM, ``tokenizer`` its tokenizer (or ``None`` with
    token ids and no stop strings), ``prompt`` a string or token ids (batch size 1),
    ``max_new_tokens`` the most new tokens; the keyword options (``method``, ``capacity``,
    ``temperature``, ``drafter`` ...) and their defaults are :data:`racer_ref.options.OPTIONS`,
    each described once, with its rule, on [`racer_ref.options.Options`][racer_ref.options.Options].

    Returns:
        GenerationResult: the new token ids, their text, the accepted length and tree size
            of every step, the timings and the stopping rule that ended the call.

    Raises:
        ValueError: an argument out of range or contradicting another, an unsupported cache or
            model (named; logits wider than the vocabulary: at prefill). TypeError: an argument
            of the wrong kind or an unknown option (named). Both before any other work.
    """
    clock = _Clock(model)
    opts = resolve(model, tokenizer, prompt, max_new_tokens, options)  # checked once, here; the loop trusts opts
    clock.last = time.perf_counter()  # the checks (and a model's first exactness probe) count in "total" only
    cache, k = opts.cache, opts.k
    out = _Output(opts, tokenizer)
    output = out.token_ids  # new tokens, the root of the next step last
    result = GenerationResult(token_ids=output, text=None, timings=clock.timings, method=opts.method)
    processors = opts.processors  # None: the raw logits are the target's scores
    committed = 0  # output tokens already committed to the drafter (the prompt is, at prefill)
    # The drafter's step trusts the loop's ids. A shared Drafter serves one generate() call
    # at a time (a second caller is refused at once); a new one is this call's alone.
    with opts.drafting as drafter, torch.inference_mode():
        if opts.streamer is not None:
            opts.streamer.put(torch.tensor(opts.prompt_ids[None]))
        clock.lap("bookkeeping")
        done = opts.max_new_tokens == 0
        if not done:
            # ---- prefill: the prompt fills the cache and predicts the first root ----------
            prompt_t = torch.from_numpy(opts.prompt_ids).to(opts.device)  # (P,)
            logits = forward_prompt(model, cache, prompt_t)  # (P, vocab)
            if logits.shape[-1] > opts.vocab_size:  # every id the drafter gets must be < vocab_size
                raise ValueError(f"model: {logits.shape[-1]} logits per position, more than its "
                                 f"config's vocab_size {opts.vocab_size}")
            root_scores = logits[-1] if processors is None else processors.root_scores(prompt_t, logits[-1])
            # The first root: the argmax (greedy) or a sample of the target distribution.
            root = (int(root_scores.argmax()) if opts.temperature == 0 else
                    sample(target_probs(root_scores[None], opts.temperature, opts.top_p)[0], opts.generator))
            clock.lap("prefill", sync=True)
            # Copy-logit rows for every prompt position; the automaton learns the prompt.
            topk = logits.topk(k, dim=-1).indices.cpu().numpy()  # (P, k) int64
            root_row = -1  # the row of topk that produced the root
            drafter.observe(opts.prompt_ids, topk)
            drafter.commit(opts.prompt_ids)
            clock.lap("drafting")
            out.emit([root], root_scores[None])
            done = out.stop_reason is not None
            clock.lap("bookkeeping")
        while not done:
            # Room left for this step's block (accepted drafts + next root).
            room = min(opts.max_new_tokens, opts.room) - len(output)
            if room <= 0:
                out.stop_reason = "max_length"
                break
            # ---- draft ----------------------------------------------------------------------
            tree = drafter.draft(root, last_topk=topk[root_row])  # last_topk: read by "logits-last"
            tree = clip_draft_tree(tree, room - 1)
            clock.lap("drafting")
            # ---- verify: one forward pass over the whole tree -------------------------------
            past_length = cache.get_seq_length()  # L = prompt + output - 1
            logits = opts.forward(model, cache, tree)  # (n, vocab): verify.forward_tree, unless the model needs chains
            clock.lap("forward", sync=True)
            # ---- accept ---------------------------------------------------------------------
            # Every node's top-k feeds the copy-logit table; the same top-k gives the argmax.
            topk_values, topk_ids = logits.topk(k, dim=-1)  # (n, k) each
            if processors is None:  # the target's scores are the logits: greedy's argmax is in the top-k
                scores = logits  # (n, vocab)
                predicted = argmax_from_topk(logits, topk_values, topk_ids) if opts.temperature == 0 else None
            else:  # each node's processed scores, with its own prefix: prompt + output + its path
                committed_t = torch.tensor(opts.prompt_ids.tolist() + output[:-1], device=opts.device)
                scores, predicted = processors(committed_t, tree, logits), None  # (n, vocab)
            if opts.temperature == 0:
                accepted, next_root = accept_greedy(scores, tree, predicted)
            else:
                probs = target_probs(scores, opts.temperature, opts.top_p)  # (n, vocab)
                accepted, next_root = accept_sampling(probs, tree, opts.generator)
            result.tree_sizes.append(len(tree))
            clock.lap("acceptance")
            # ---- commit: cache, output, drafter ---------------------------------------------
            keep_accepted(cache, past_length, accepted)
            rows = scores[accepted] if opts.stopping_criteria is not None else None  # row j chose token j
            kept = out.emit(tree.tokens[accepted[1:]].tolist() + [next_root], rows)
            done = out.stop_reason is not None
            # a counts what this step committed (cut by a stopping rule), a_raw what was accepted.
            result.accepted_lengths.append(kept - 1)
            result.raw_accepted_lengths.append(len(accepted) - 1)
            root = next_root
            clock.lap("bookkeeping")
            topk, root_row = topk_ids.cpu().numpy(), accepted[-1]  # (n, k) int64; the next root's row
            observed = np.arange(len(tree)) if opts.observe_rejected else np.asarray(accepted)
            drafter.observe(tree.tokens[observed], topk[observed])
            # The drafter learns every committed token except the newest (the next root):
            # exactly the tokens now in the KV cache.
            if not done:
                drafter.commit(np.asarray(output[committed:-1], dtype=np.int64))
                committed = len(output) - 1
            clock.lap("drafting")
        if committed < len(output):
            # The last tokens are output too: a shared drafter should know them next call.
            drafter.commit(np.asarray(output[committed:], dtype=np.int64))
        if opts.streamer is not None:
            opts.streamer.end()
    result.stop_reason = out.stop_reason or "max_new_tokens"
    if tokenizer is not None:
        result.text = tokenizer.decode(output, skip_special_tokens=True)
    clock.lap("bookkeeping")
    clock.timings["total"] = clock.last - clock.started
    return result


# help(generate) and inspect show every option with its default (the list lives in OPTIONS).
_signature = inspect.signature(generate)
generate.__signature__ = _signature.replace(parameters=[  # type: ignore[attr-defined]
    *list(_signature.parameters.values())[:4],  # model, tokenizer, prompt, max_new_tokens
    *(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=value) for name, value in OPTIONS.items())])
