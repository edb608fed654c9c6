"""One rule, one message, at every entry point (issue 35, item 2).

Each bad setting is fed to every entry point that takes it: ``racer_ref.generate`` (both
backends, and ``method="ar"``, which builds no drafter), ``racer_ref.Drafter`` (both
backends), ``custom_generate`` (``model.generate(custom_generate=racer_decoding, ...)``) and
the command line (``racer-ref generate ...``, refused while parsing, before a model loads).
Every one raises the same message, the Rust core's words (``rust/src/error.rs``: ``"<arg>:
<what was wrong>"``), which the twin's rules (``racer_ref.reference.limits``) write too.
The command line takes text, so it has no ``capacity=True``, ``ngram`` or token ids to refuse.
"""

from __future__ import annotations

import re

import pytest
import torch

import racer_ref
from models import tiny_model
from racer_ref.app import cli
from racer_ref.integrations.hf import racer_decoding

VOCAB = 128
PROMPT = [5, 6, 7, 8, 5, 6, 7, 8, 5]
METHOD_LIST = '"racer", "retrieval", "logits", "logits-last", "pld", "ar"'

#: setting -> (its value, the exception, the message, its value on the command line or None).
CASES = {
    "capacity=True": (dict(capacity=True), TypeError, "capacity: must be an int, got bool", None),
    "capacity=0": (dict(capacity=0), ValueError, "capacity: must be in [1, 4096], got 0", ["--capacity", "0"]),
    "capacity=5000": (dict(capacity=5000), ValueError, "capacity: must be in [1, 4096], got 5000", ["--capacity", "5000"]),
    "ngram=1": (dict(ngram=1), ValueError, "ngram: must be in [2, 256], got 1", None),
    "breadth=0": (dict(breadth=0), ValueError, f"breadth: must be in [1, vocab_size] = [1, {VOCAB}], got 0", None),
    "max_nodes=5": (dict(max_nodes=5), ValueError, "max_nodes: must be in [ngram, 2147483647] = [10, 2147483647]", None),
    "tree='x'": (dict(tree="x"), ValueError, 'tree: unknown tree "x"; expected one of "expected", "paper"',
                 ["--tree", "x"]),
    "backend='gpu'": (dict(backend="gpu"), ValueError, 'backend: unknown backend "gpu"; expected one of "rust", "python"',
                      ["--backend", "gpu"]),
    "backend=1": (dict(backend=1), TypeError, "backend: must be a str, got int", None),
    "method='medusa'": (dict(method="medusa"), ValueError, f'method: unknown method "medusa"; expected one of {METHOD_LIST}',
                        ["--method", "medusa"]),
    "method=1": (dict(method=1), TypeError, "method: must be a str, got int", None),
}


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama", vocab_size=VOCAB)


def entry_points(model, setting):
    """``name -> call`` for every entry point that takes ``setting`` (a dict of one keyword)."""
    calls = {}
    for backend in ("rust", "python"):
        kwargs = {"backend": backend, **setting}
        calls[f"generate[{kwargs['backend']}]"] = lambda kw=kwargs: racer_ref.generate(model, None, PROMPT, 4, **kw)
        method = {"method": "racer", **kwargs}
        calls[f"Drafter[{kwargs['backend']}]"] = lambda kw=method: racer_ref.Drafter(
            kw.pop("method"), VOCAB, **{k: v for k, v in kw.items() if k != "backend"}, backend=kw["backend"])
    if "method" not in setting:
        calls["generate[ar]"] = lambda: racer_ref.generate(model, None, PROMPT, 4, method="ar", **setting)

    def hf():
        ids = torch.tensor([PROMPT])
        return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=4,
                              custom_generate=racer_decoding, **setting)

    calls["custom_generate"] = hf
    return calls


@pytest.mark.parametrize("case", list(CASES))
def test_every_entry_point_gives_the_rules_message(model, case, recwarn):
    setting, error, message, _ = CASES[case]
    calls = []
    hook = model.register_forward_pre_hook(lambda *a: calls.append(1))
    try:
        for name, call in entry_points(model, setting).items():
            with pytest.raises(error) as info:
                call()
            assert str(info.value).startswith(message), (name, str(info.value))
    finally:
        hook.remove()
    assert calls == []  # before any forward pass


@pytest.mark.parametrize("case", [c for c in CASES if CASES[c][3] is not None])
def test_the_command_line_gives_the_same_message(case, capsys):
    _, _, message, argv = CASES[case]
    with pytest.raises(SystemExit) as exc:
        cli.main(["generate", *argv, "hi"])
    assert exc.value.code == 2
    assert f"argument {argv[0]}: {message}" in capsys.readouterr().err


def test_a_token_id_out_of_range_gets_one_message(model):
    """The token-id range rule, written once per language: the drafter's words for a prompt,
    an EOS id, and the ids a drafter observes or commits."""
    bad = f"token id {VOCAB} at index 2 is outside [0, vocab_size) = [0, {VOCAB})"
    for backend in ("rust", "python"):
        with pytest.raises(ValueError, match="^" + re.escape(f"prompt: {bad}")):
            racer_ref.generate(model, None, [1, 2, VOCAB], 4, backend=backend)
        with pytest.raises(ValueError, match="^" + re.escape(f"token_ids: {bad}")):
            racer_ref.Drafter("racer", VOCAB, backend=backend).commit([1, 2, VOCAB])
    with pytest.raises(ValueError, match=f"^eos_token_id: token id {VOCAB} at index 1 is outside"):
        racer_ref.generate(model, None, PROMPT, 4, eos_token_id=[3, VOCAB])
    ids = torch.tensor([[1, 2, VOCAB]])
    with pytest.raises((ValueError, IndexError)) as info:
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, custom_generate=racer_decoding)
    assert str(info.value).startswith(f"prompt: {bad}")
