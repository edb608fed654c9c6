"""Logits processors on a draft tree: every node scored with its own prefix.

A transformers logits processor (repetition penalty, ``no_repeat_ngram_size``,
``min_new_tokens``, bad words, suppressed tokens, top-k / top-p / temperature, ...) is a
function ``processor(input_ids, scores) -> scores``: it reads the tokens *before* the
position it scores. Plain decoding calls it once per new token with the whole sequence so
far. In a draft tree every node has its own path, so one verify pass needs one such call
per node, with that node's own prefix::

    committed tokens (in the KV cache):  t0 t1 ... t(L-1)
    draft tree:          node 0 = root --- 1 "the" --- 3 "cat"
                                       `-- 2 "a"
    input_ids of node 3: t0 ... t(L-1) root "the" "cat"      (L + depth + 1 tokens)
    input_ids of node 2: t0 ... t(L-1) root "a"

Row u of the processed scores is then exactly what ``model.generate`` would score after the
same tokens, so greedy acceptance (argmax) and sampling (softmax) see the same target as
plain decoding, and RACER stays lossless with any such processor.

Cheap where it is safe: transformers' own processors that treat each row of a batch alone
(:data:`ROW_WISE`) get one call per tree depth, with all nodes of that depth as one batch
(their prefixes have the same length). Every other processor is called row by row, with a
batch of one, which is exactly what it sees in plain batch-1 decoding. Processors that
cannot be applied per node (:data:`REFUSED`: they keep state between calls or run a model
themselves) are refused with an error that names them.
"""

from __future__ import annotations

import warnings
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import torch
import transformers

from racer_ref.tree import DraftTree

#: transformers processors that score each row of a batch on its own, from that row's
#: input ids and scores only, keeping no state between calls (read in transformers 4.56 and
#: 5.24): safe to call once per tree depth with every node of that depth as one batch.
ROW_WISE = tuple(
    cls for cls in (getattr(transformers, name, None) for name in (
        "MinLengthLogitsProcessor", "MinNewTokensLengthLogitsProcessor", "TemperatureLogitsWarper",
        "RepetitionPenaltyLogitsProcessor", "TopPLogitsWarper", "TopKLogitsWarper", "TopHLogitsWarper",
        "MinPLogitsWarper", "TypicalLogitsWarper", "EpsilonLogitsWarper", "EtaLogitsWarper",
        "NoRepeatNGramLogitsProcessor", "SequenceBiasLogitsProcessor", "NoBadWordsLogitsProcessor",
        "ForcedBOSTokenLogitsProcessor", "ForcedEOSTokenLogitsProcessor", "InfNanRemoveLogitsProcessor",
        "ExponentialDecayLengthPenalty", "LogitNormalization", "SuppressTokensAtBeginLogitsProcessor",
        "SuppressTokensLogitsProcessor",
    )) if cls is not None
)

#: transformers processors that cannot score tree nodes, with the reason and the setting
#: that creates them: they keep state from one call to the next (which assumes one call
#: per new token of one sequence), run a model of their own, or change the batch layout.
REFUSED: Dict[str, str] = {
    "ClassifierFreeGuidanceLogitsProcessor": "guidance_scale: needs a doubled (conditional + unconditional) batch",
    "UnbatchedClassifierFreeGuidanceLogitsProcessor":
        "guidance_scale: runs the model on its own cache once per new token",
    "SynthIDTextWatermarkLogitsProcessor": "watermarking_config: keeps watermark state between calls",
    "WhisperTimeStampLogitsProcessor": "Whisper timestamps: keeps state between calls",
    "WhisperNoSpeechDetection": "Whisper no-speech detection: keeps state between calls",
    "AlternatingCodebooksLogitsProcessor": "Bark codebooks: assumes one call per new token",
    "DiaClassifierFreeGuidanceLogitsProcessor": "Dia guidance: needs a doubled batch",
    "DiaEOSChannelFilterLogitsProcessor": "Dia channels: multi-channel scores",
    "DiaEOSDelayPatternLogitsProcessor": "Dia delay pattern: keeps state between calls",
}


def _name(processor: Any) -> str:
    return type(processor).__name__


class TreeLogitsProcessor:
    """A list of logits processors applied to every draft-tree node with its own prefix.

    Args:
        processors: a ``transformers.LogitsProcessorList`` or any sequence of callables
            ``processor(input_ids, scores) -> scores`` (``input_ids`` ``(batch, length)``
            int64, ``scores`` ``(batch, vocab)`` float32), applied in order, as
            ``model.generate`` applies them.

    Raises:
        TypeError: ``processors`` is not a sequence, or holds something not callable.
        ValueError: a processor of :data:`REFUSED` (the message names it and its setting).

    Processors that are not transformers' own are called row by row (a batch of one per
    node, so they see exactly what plain decoding shows them) with a one-time
    ``UserWarning``: they must depend on their arguments only, because they are also
    called for nodes the target then rejects.
    """

    def __init__(self, processors: Sequence[Any]) -> None:
        if isinstance(processors, (str, bytes)) or not isinstance(processors, Sequence):
            raise TypeError(f"logits_processor: expected a LogitsProcessorList or a list of processors, "
                            f"got {type(processors).__name__}")
        for processor in processors:
            if _name(processor) in REFUSED and type(processor).__module__.startswith("transformers"):
                raise ValueError(f"logits_processor: {_name(processor)} cannot be applied per draft-tree node "
                                 f"({REFUSED[_name(processor)]}); remove that setting to decode with RACER")
            if not callable(processor):
                raise TypeError(f"logits_processor: {_name(processor)} is not callable")
        own = [p for p in processors if not type(p).__module__.startswith("transformers")]
        for processor in own:
            warnings.warn(f"logits_processor: {_name(processor)} is called once per draft-tree node, row by row, "
                          "rejected nodes included; it must depend only on (input_ids, scores) and keep no state",
                          UserWarning, stacklevel=3)
        self.processors = list(processors)
        # For each processor: may it take all nodes of one depth as one batch?
        self.row_wise = [isinstance(p, ROW_WISE) and not self._tensor_prompt_ignore(p) for p in self.processors]

    @staticmethod
    def _tensor_prompt_ignore(processor: Any) -> bool:
        """RepetitionPenalty with a per-row ``prompt_ignore_length`` tensor is batch-shaped."""
        return isinstance(getattr(processor, "prompt_ignore_length", None), torch.Tensor)

    def __len__(self) -> int:
        return len(self.processors)

    def __call__(self, committed: torch.Tensor, tree: DraftTree, logits: torch.Tensor) -> torch.Tensor:
        """Processed scores of every node of ``tree``.

        Args:
            committed: ``(L,)`` int64, the committed tokens before the root (those in the KV
                cache), on ``logits``' device.
            tree: the draft tree whose verify pass gave ``logits``.
            logits: ``(n, vocab)`` raw logits, row u predicting the token after node u.

        Returns:
            ``(n, vocab)`` float32 scores (a new tensor): row u is the processors' output
            for ``input_ids = committed + the tokens on the path root..u``.
        """
        scores = logits.to(torch.float32, copy=True)  # as model.generate: float32 copies
        if not self.processors:
            return scores
        device = logits.device
        paths = _paths(tree)  # root..u token ids per node
        depths = tree.depths
        for depth in np.unique(depths).tolist():
            nodes = np.flatnonzero(depths == depth)  # (n_d,) the nodes of this depth
            path_ids = torch.as_tensor(np.stack([paths[u] for u in nodes]), device=device)  # (n_d, depth + 1)
            input_ids = torch.cat([committed[None].expand(len(nodes), -1), path_ids], dim=1)  # (n_d, L + depth + 1)
            index = torch.as_tensor(nodes, device=device)
            scores[index] = self._apply(input_ids, scores[index])
        return scores

    def _apply(self, input_ids: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """The processors in order on ``rows`` ``(b, vocab)`` with prefixes ``input_ids`` ``(b, len)``."""
        for processor, row_wise in zip(self.processors, self.row_wise):
            if row_wise:
                rows = processor(input_ids, rows)
            else:  # a batch of one per row: what plain batch-1 decoding shows the processor
                rows = torch.cat([processor(input_ids[i:i + 1], rows[i:i + 1]) for i in range(len(rows))])
        return rows.to(torch.float32)

    def root_scores(self, prompt_ids: torch.Tensor, logits_row: torch.Tensor) -> torch.Tensor:
        """Processed scores of the prefill's last row: ``(vocab,)`` float32, for the first root.

        ``prompt_ids``: ``(P,)`` int64 on the row's device (the whole prompt is the prefix).
        """
        return self._apply(prompt_ids[None], logits_row[None].to(torch.float32, copy=True))[0]


def _paths(tree: DraftTree) -> List[np.ndarray]:
    """``paths[u]``: the token ids on the path root..u, ``(depth_u + 1,)`` int64."""
    tokens = tree.tokens
    paths: List[np.ndarray] = []
    for u, parent in enumerate(tree.parents.tolist()):  # BFS order: a parent comes first
        paths.append(tokens[:1] if parent < 0 else np.append(paths[parent], tokens[u]))
    return paths


def as_tree_processor(logits_processor: Any) -> Optional[TreeLogitsProcessor]:
    """``logits_processor`` checked and wrapped; ``None`` when there is nothing to apply."""
    if logits_processor is None:
        return None
    if isinstance(logits_processor, TreeLogitsProcessor):
        wrapped = logits_processor
    else:
        wrapped = TreeLogitsProcessor(logits_processor)
    return wrapped if len(wrapped) else None


def processors_from_generation_config(model: Any, prompt_ids: Any, generation_config: Any = None,
                                      **settings: Any) -> Any:
    """The logits processors ``model.generate`` would build, for :func:`racer_ref.generate`.

    Args:
        model: a transformers causal LM.
        prompt_ids: the prompt's token ids, a sequence or a 1-D / ``(1, P)`` tensor
            (``min_new_tokens`` counts after it; encoder penalties read it).
        generation_config: a ``GenerationConfig``; ``None`` takes ``model.generation_config``.
        settings: overrides, as keyword arguments of ``model.generate``
            (``repetition_penalty=1.3``, ``no_repeat_ngram_size=3``, ``do_sample=True``, ...).

    Returns:
        a ``transformers.LogitsProcessorList``, built by transformers itself (so it is the
        list ``model.generate`` uses for the same settings, sampling warpers included when
        ``do_sample`` is true: then call ``generate(..., temperature=1.0)`` so that the
        temperature is not applied twice).

    Raises:
        ValueError: a setting transformers rejects.
    """
    import copy

    config = copy.deepcopy(generation_config if generation_config is not None else model.generation_config)
    config.update(**settings)
    if not config.do_sample:  # the sampling settings are not used: say so to validate() as generate() does
        for name in ("temperature", "top_p", "top_k", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff"):
            setattr(config, name, None)
    config.validate()
    prompt = torch.as_tensor(prompt_ids, dtype=torch.long, device=model.device).reshape(1, -1)  # (1, P)
    # Turns eos_token_id & co. into the tensors the processors read (private, 4.56 to 5.x).
    # One sequence, no padding: as if its all-ones mask were given (False made transformers
    # warn about a missing attention mask on every call).
    model._prepare_special_tokens(config, kwargs_has_attention_mask=True, device=model.device)
    return model._get_logits_processor(generation_config=config, input_ids_seq_length=prompt.shape[1],
                                       encoder_input_ids=prompt, prefix_allowed_tokens_fn=None,
                                       logits_processor=transformers.LogitsProcessorList(),
                                       device=model.device, model_kwargs={})


def default_processors(model: Any, prompt_ids: Sequence[int], max_new_tokens: int, eos_token_id: Any = None) -> Any:
    """What ``model.generate(do_sample=False)`` applies from ``model.generation_config``.

    The processors of greedy decoding (repetition penalty, ``no_repeat_ngram_size``,
    ``min_new_tokens``, bad words, suppressed tokens, ...), not the sampling warpers
    (temperature, top-k, top-p): :func:`racer_ref.generate` takes its own ``temperature``
    and ``top_p``. An empty list for most configs; ``[]`` for a model without a
    generation config.
    """
    if getattr(model, "generation_config", None) is None or not hasattr(model, "_get_logits_processor"):
        return []
    settings: Dict[str, Any] = dict(do_sample=False, max_length=len(prompt_ids) + max_new_tokens)
    if eos_token_id is not None and not (isinstance(eos_token_id, (list, tuple)) and len(eos_token_id) == 0):
        settings["eos_token_id"] = eos_token_id  # [] (no EOS stops generation): the config's ids, for min_new_tokens
    return processors_from_generation_config(model, prompt_ids, **settings)


def tree_processor(model: Any, logits_processor: Any, prompt_ids: Sequence[int], max_new_tokens: int,
                   eos_token_id: Any) -> Optional[TreeLogitsProcessor]:
    """What ``generate()`` applies to every draft-tree node: ``logits_processor``, or with
    ``None`` what ``model.generate(do_sample=False)`` applies from the model's generation
    config (:func:`default_processors`). ``None`` when that leaves none to apply."""
    if logits_processor is None:
        logits_processor = default_processors(model, prompt_ids, max_new_tokens, eos_token_id)
    return as_tree_processor(logits_processor)  # None: raw logits are the target's scores


#: Settings of ``model.generation_config`` that a sampling ``model.generate`` applies and
#: ``generate()`` does not take from the config (it has its own ``temperature`` and ``top_p``;
#: pass the others as ``logits_processor``), with their neutral values: a setting away from
#: them makes the two differ when sampling, so :func:`warn_unapplied_sampling` warns. The
#: greedy processors (repetition penalty, ``no_repeat_ngram_size``, ...) are applied.
UNAPPLIED_SAMPLING_SETTINGS = {
    "top_k": (None, 0), "typical_p": (None, 1.0), "min_p": (None, 0.0), "epsilon_cutoff": (None, 0.0),
    "eta_cutoff": (None, 0.0),
}


def warn_unapplied_sampling(config: Any) -> None:
    """Warn about every sampling setting of the model's generation ``config`` that a sampling
    ``model.generate`` would apply and ``generate()`` does not (they change the distribution)."""
    ignored = [f"{name}={getattr(config, name)!r}" for name, neutral in UNAPPLIED_SAMPLING_SETTINGS.items()
               if getattr(config, name, None) not in neutral]
    if ignored:
        warnings.warn(f"model.generation_config: {', '.join(ignored)} not applied by racer_ref.generate "
                      "when sampling (pass them as logits_processor), so its distribution differs from "
                      "model.generate's", stacklevel=4)
