"""Exact on every model it accepts (racer_ref.exactness): ALiBi models decode with chain drafts,
LongRoPE models never straddle the rotary switch and rebuild the cache at it as Phi-3's
``generate`` does, offloaded models run on their execution device, and the probe catches a
tree pass that differs from sequential passes on a model it knows nothing about.

Every model is a tiny seeded random one built from its transformers config; the oracle is
``model.generate(do_sample=False)`` (``greedy_reference``). For sampling the check is on the
target distribution itself: the scores racer samples each token from equal the logits that
``model.generate`` computes for the same tokens (forced), so the lossless acceptance rule
(tests/test_sampling.py) gives the target's distribution.
"""

from __future__ import annotations

import logging
import tempfile

import numpy as np
import pytest
import torch

import racer_ref
import racer_ref.exactness as exactness
from models import greedy_reference, single_thread, tiny_model  # noqa: F401 (single_thread: fixture)

V = 128


def _scaled(model: torch.nn.Module, scale: float = 3.0) -> torch.nn.Module:
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() >= 2:
                param.mul_(scale)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model.eval()


def alibi_model(kind: str) -> torch.nn.Module:
    """A random 2-layer MPT, Bloom or Falcon (alibi=True)."""
    from transformers import (BloomConfig, BloomForCausalLM, FalconConfig, FalconForCausalLM, MptConfig,
                              MptForCausalLM)

    torch.manual_seed(0)
    if kind == "mpt":
        model = MptForCausalLM(MptConfig(vocab_size=V, d_model=64, n_heads=4, n_layers=2, max_seq_len=256))
    elif kind == "bloom":
        model = BloomForCausalLM(BloomConfig(vocab_size=V, hidden_size=64, n_head=4, n_layer=2))
    else:
        model = FalconForCausalLM(FalconConfig(vocab_size=V, hidden_size=64, num_attention_heads=4,
                                               num_hidden_layers=2, alibi=True, new_decoder_architecture=False,
                                               multi_query=True))
    return _scaled(model)


#: LongRoPE switches from the short to the long factors past this position.
SWITCH = 40


def longrope_model(rebuild: bool = True) -> torch.nn.Module:
    """A random 2-layer Phi-3 with LongRoPE switching at position 40 (its generate rebuilds
    the cache there), or with ``rebuild=False`` a Llama with the same rotary settings (whose
    generate does not rebuild: the cache keeps the short factors below the switch)."""
    from transformers import LlamaConfig, LlamaForCausalLM, Phi3Config, Phi3ForCausalLM

    torch.manual_seed(0)
    rope = dict(rope_type="longrope", rope_theta=10000.0, short_factor=[1.0 + 0.1 * i for i in range(8)],
                long_factor=[2.0 + 0.3 * i for i in range(8)], original_max_position_embeddings=SWITCH)
    common = dict(vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=4, max_position_embeddings=160, rope_parameters=rope,
                  bos_token_id=None, eos_token_id=None, pad_token_id=0)
    if rebuild:
        model = Phi3ForCausalLM(Phi3Config(original_max_position_embeddings=SWITCH, **common))
    else:
        model = LlamaForCausalLM(LlamaConfig(**common))
    return _scaled(model)


def prompts(n: int, length: int = 28):
    return [torch.randint(0, V, (length,), generator=torch.Generator().manual_seed(s)).tolist() for s in range(n)]


#: A repetitive prompt: a random chunk three times, so that drafts are accepted.
REPEAT = prompts(1, 9)[0] * 3


@pytest.fixture(scope="module")
def alibi_models():
    return {kind: alibi_model(kind) for kind in ("mpt", "bloom", "falcon")}


# ----------------------------------------------------------------------------- ALiBi: chain drafts
@pytest.mark.parametrize("kind", ["mpt", "bloom", "falcon"])
@pytest.mark.parametrize("backend", ["rust", "python"])
def test_alibi_models_equal_generate_with_chain_drafts(alibi_models, kind, backend):
    model = alibi_models[kind]
    for prompt in prompts(4):
        want = greedy_reference(model, prompt, 50)
        assert racer_ref.generate(model, None, prompt, 50, backend=backend).token_ids == want
        assert racer_ref.generate(model, None, prompt, 50, method="ar").token_ids == want
    assert model.racer_plan.mode == "chain" and "ALiBi" in model.racer_plan.cause


@pytest.mark.parametrize("kind", ["mpt", "bloom", "falcon"])
def test_alibi_chain_drafts_are_accepted_and_announced_once(kind, caplog):
    model = alibi_model(kind)
    tokens = []
    with caplog.at_level(logging.WARNING, logger="racer_ref"):
        result = racer_ref.generate(model, None, REPEAT, 40, callback=tokens.extend)
        racer_ref.generate(model, None, REPEAT, 10)
    notices = [r.getMessage() for r in caplog.records if r.name == "racer_ref"]
    assert len(notices) == 1 and type(model).__name__ in notices[0] and "chain drafts" in notices[0]
    assert "\n" not in notices[0]
    assert result.token_ids == greedy_reference(model, REPEAT, 40) == tokens
    assert result.mean_accepted_tokens > 1.5  # chains of the repeated chunk are accepted
    assert max(result.tree_sizes) > 2  # more than a root and one draft: real chains


def test_the_probe_alone_finds_a_slot_based_bias(monkeypatch, caplog):
    """Without the config rule, the probe's tree pass gives MPT's off-path copies other logits
    than the first path's (relative error ~0.1, while exact models stay ~1e-6) and the chain
    probe passes it."""
    monkeypatch.setattr(exactness, "known_cause", lambda model: (None, (), None))
    model = alibi_model("mpt")
    tree_error, raised = exactness.probe_tree(model, V)
    chain_error, chain_raised = exactness.probe_chain(model, V)
    assert tree_error > 1e-2 and chain_error < 1e-5 and raised == chain_raised == ""
    with caplog.at_level(logging.WARNING, logger="racer_ref"):
        out = racer_ref.generate(model, None, prompts(1)[0], 40).token_ids
    assert out == greedy_reference(model, prompts(1)[0], 40)
    assert model.racer_plan.mode == "chain" and "the same path's" in model.racer_plan.cause
    assert any("MptForCausalLM" in r.getMessage() for r in caplog.records)


def test_the_probe_catches_a_tree_pass_that_raises(monkeypatch):
    monkeypatch.setattr(exactness, "known_cause", lambda model: (None, (), None))
    model = alibi_model("bloom")
    tree_error, raised = exactness.probe_tree(model, V)
    assert tree_error == float("inf") and raised.startswith("ValueError")
    assert exactness.probe_chain(model, V) == (pytest.approx(0, abs=1e-5), "")
    assert racer_ref.generate(model, None, prompts(1)[0], 30).token_ids == greedy_reference(model, prompts(1)[0], 30)


@pytest.mark.parametrize("kind", ["llama", "gpt2", "qwen2"])
def test_exact_models_pass_the_probe_with_float_rounding_only(kind):
    model = tiny_model(kind)
    tree_error, raised = exactness.probe_tree(model, 128)
    chain_error, chain_raised = exactness.probe_chain(model, 128)
    assert tree_error < 1e-5 and chain_error < 1e-5 and raised == chain_raised == ""
    racer_ref.generate(model, None, [1, 2, 3], 4)
    plan = model.racer_plan
    assert plan.mode == "tree" and not plan.wraps and plan.cause is None and plan.seconds > 0


def slot_dependent_model() -> torch.nn.Module:
    """A Llama whose logits, in every pass of several tokens but the prefill, shift with each
    token's slot in the pass (as a broken kernel might): neither a tree nor a chain is exact
    there, one token a step (and the prefill) is."""
    from transformers import LlamaForCausalLM

    class SlotDependent(LlamaForCausalLM):
        def forward(self, input_ids=None, cache=None, position_ids=None, **kwargs):
            before = cache.get_seq_length() if cache is not None else 0
            out = super().forward(input_ids=input_ids, cache=cache, position_ids=position_ids, **kwargs)
            branching = position_ids is not None and len(set(position_ids[0].tolist())) < input_ids.shape[1]
            if input_ids.shape[1] > 1 and (before > 0 or branching):
                slots = torch.arange(input_ids.shape[1], dtype=out.logits.dtype)[:, None]  # (n, 1)
                out.logits = out.logits + 0.5 * slots * torch.linspace(0, 1, out.logits.shape[-1])
            return out

    inner = tiny_model("llama")
    model = SlotDependent(inner.config).eval()
    model.load_state_dict(inner.state_dict())
    model.generation_config = inner.generation_config
    return model


def test_a_model_that_fails_tree_and_chain_runs_one_token_a_step(caplog):
    model = slot_dependent_model()
    with caplog.at_level(logging.WARNING, logger="racer_ref"):
        result = racer_ref.generate(model, None, REPEAT, 30)
    assert model.racer_plan.mode == "ar"
    assert any("one token a step" in r.getMessage() for r in caplog.records)
    assert result.token_ids == greedy_reference(model, REPEAT, 30)
    assert set(result.tree_sizes) == {1}


def test_the_plan_is_made_once_per_model_and_again_when_attention_changes():
    model = tiny_model("llama", attn="eager")
    racer_ref.generate(model, None, [1, 2, 3], 4)
    plan = model.racer_plan
    racer_ref.generate(model, None, [4, 5, 6], 4)
    assert model.racer_plan is plan  # not probed again
    model.config._attn_implementation = "sdpa"
    racer_ref.generate(model, None, [4, 5, 6], 4)
    assert model.racer_plan is not plan and model.racer_plan.mode == "tree"


def test_probe_false_skips_the_probe_but_not_the_known_causes():
    model = tiny_model("llama")
    racer_ref.generate(model, None, [1, 2, 3], 4, probe=False)
    assert np.isnan(model.racer_plan.error) and model.racer_plan.mode == "tree"
    mpt = alibi_model("mpt")
    out = racer_ref.generate(mpt, None, REPEAT, 30, probe=False).token_ids
    assert mpt.racer_plan.mode == "chain" and out == greedy_reference(mpt, REPEAT, 30)


@pytest.mark.parametrize("value", [1, "yes", None])
def test_probe_must_be_a_bool(value):
    model = tiny_model("llama")
    calls = []
    with pytest.raises(TypeError, match="probe: expected a bool"):
        racer_ref.generate(model, None, [1, 2, 3], 4, probe=value, callback=calls.append)
    assert calls == [] and getattr(model, "racer_plan", None) is None


# ----------------------------------------------------------------------------- LongRoPE
@pytest.mark.parametrize("rebuild", [True, False])
@pytest.mark.parametrize("backend", ["rust", "python"])
def test_longrope_equals_generate_across_the_switch(rebuild, backend):
    model = longrope_model(rebuild)
    for prompt in prompts(8):
        want = greedy_reference(model, prompt, 50)
        assert racer_ref.generate(model, None, prompt, 50, backend=backend).token_ids == want
        assert racer_ref.generate(model, None, prompt, 50, method="ar").token_ids == want
    plan = model.racer_plan
    assert plan.mode == "tree" and plan.switch == (SWITCH,) and plan.rebuild == (SWITCH if rebuild else None)


def test_longrope_passes_never_straddle_the_switch():
    model = longrope_model()
    seen = []
    rotary = model.model.rotary_emb
    def hook(module, args, kwargs, out):
        positions = args[1] if len(args) > 1 else kwargs["position_ids"]
        seen.append((int(positions.min()), int(positions.max()), positions.shape[-1]))

    rotary.register_forward_hook(hook, with_kwargs=True)
    prompt = REPEAT + REPEAT[:2]  # 29 tokens
    result = racer_ref.generate(model, None, prompt, 50)
    assert result.token_ids == greedy_reference(longrope_model(), prompt, 50)
    decode = seen[seen.index((0, len(prompt) - 1, len(prompt))):]  # from the prefill of the call on
    straddling = [(lo, hi) for lo, hi, _ in decode if lo < SWITCH <= hi and lo > 0]
    assert straddling == []
    rebuilt = [(lo, hi, n) for lo, hi, n in decode if lo == 0 and hi == SWITCH]
    assert rebuilt == [(0, SWITCH, SWITCH + 1)]  # one pass recomputes the whole sequence, as generate
    assert result.mean_accepted_tokens > 1.5 and max(result.tree_sizes) > 2


@pytest.mark.parametrize("make", [lambda: longrope_model(), lambda: alibi_model("mpt")], ids=["longrope", "mpt"])
def test_sampling_uses_the_target_distribution_of_sequential_decoding(make):
    """The scores every sampled token is drawn from equal ``model.generate``'s logits for the
    same (forced) tokens, across the LongRoPE switch and with ALiBi chains."""
    from transformers import LogitsProcessor, LogitsProcessorList

    model = make()
    prompt = prompts(1)[0]
    rows = []

    def record(ids, row):
        rows.append(row[0].clone())
        return False

    result = racer_ref.generate(model, None, prompt, 40, temperature=1.0, seed=3, stopping_criteria=record)
    tokens = result.token_ids

    class Force(LogitsProcessor):
        def __call__(self, input_ids, scores):
            forced = torch.full_like(scores, -float("inf"))
            forced[:, tokens[input_ids.shape[1] - len(prompt)]] = 0
            return forced

    ids = torch.tensor([prompt])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=len(tokens), do_sample=False,
                         logits_processor=LogitsProcessorList([Force()]), output_logits=True,
                         return_dict_in_generate=True)
    assert out.sequences[0, len(prompt):].tolist() == tokens
    want = torch.stack([logits[0] for logits in out.logits])
    assert torch.allclose(torch.stack(rows), want, atol=1e-4, rtol=1e-4)
    assert len(set(tokens)) > 5  # really sampled


# ----------------------------------------------------------------------------- offloaded weights
@pytest.mark.parametrize("how", ["cpu_offload", "disk_offload", "device_map"])
def test_offloaded_models_run_on_their_execution_device(how, tmp_path):
    accelerate = pytest.importorskip("accelerate")
    model = tiny_model("llama")
    prompt = REPEAT
    want = greedy_reference(model, prompt, 30)
    if how == "cpu_offload":
        accelerate.cpu_offload(model, execution_device="cpu")
    elif how == "disk_offload":
        accelerate.disk_offload(model, str(tmp_path / "offload"), execution_device="cpu")
    else:
        from transformers import AutoModelForCausalLM

        model.save_pretrained(tmp_path / "saved")
        placement = {"model.embed_tokens": "cpu", "model.layers.0": "cpu", "model.layers.1": "disk",
                     "model.norm": "cpu", "model.rotary_emb": "cpu", "lm_head": "disk"}
        model = AutoModelForCausalLM.from_pretrained(tmp_path / "saved", device_map=placement,
                                                     offload_folder=str(tmp_path / "offload")).eval()
        model.generation_config.pad_token_id = 0
    assert any(p.device.type == "meta" for p in model.parameters())
    assert exactness.input_device(model) == torch.device("cpu")
    assert greedy_reference(model, prompt, 30) == want
    result = racer_ref.generate(model, None, prompt, 30)
    assert result.token_ids == want and result.mean_accepted_tokens > 1.5


def test_input_device_reads_the_hooks_and_the_device_map():
    class Hook:
        execution_device = "cuda:1"

    class Meta(torch.nn.Module):
        device = torch.device("meta")

    model = Meta()
    model.hf_device_map = {"a": "disk", "b": 0}
    assert exactness.input_device(model) == torch.device("cuda:0")
    model._hf_hook = Hook()
    assert exactness.input_device(model) == torch.device("cuda:1")
    tempfile.gettempdir()  # (tempfile imported for the offload folders above)


# ----------------------------------------------------------------------------- the other entry points
@pytest.mark.parametrize("kind", ["mpt", "bloom"])
def test_alibi_models_through_auto_capacity_a_shared_drafter_and_custom_generate(alibi_models, kind):
    """capacity="auto" profiles the chain passes these models run (a tree pass would raise on
    Bloom), a shared drafter is wrapped like a fresh one, and model.generate(custom_generate=)
    takes the same route."""
    from racer_ref.integrations.hf import racer_decoding

    model = alibi_models[kind]
    want = greedy_reference(model, REPEAT, 40)
    assert racer_ref.generate(model, None, REPEAT, 40, capacity="auto").token_ids == want
    drafter = racer_ref.Drafter("racer", V, capacity=16)
    assert racer_ref.generate(model, None, REPEAT, 40, drafter=drafter).token_ids == want
    assert drafter.num_committed == len(REPEAT) + 40
    ids = torch.tensor([REPEAT])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=40, do_sample=False,
                         custom_generate=racer_decoding)
    assert out[0, len(REPEAT):].tolist() == want


def test_mpt_stops_at_its_context_length_max_seq_len():
    """MPT names its context length max_seq_len: a decode stops there (stop_reason
    "max_length"), as past it ALiBi has no bias to add, instead of failing mid-decode."""
    model = alibi_model("mpt")  # max_seq_len 256
    prompt = (REPEAT * 9)[:240]
    result = racer_ref.generate(model, None, prompt, 50)
    assert result.stop_reason == "max_length" and len(prompt) + len(result.token_ids) == 256
    assert result.token_ids == greedy_reference(model, prompt, 16)


def test_a_longrope_model_that_needs_chains_keeps_the_switch(monkeypatch):
    """A plan of chains on a LongRoPE model still never straddles the switch."""
    real = exactness.known_cause
    monkeypatch.setattr(exactness, "probe_tree", lambda model, vocab: (float("inf"), "RuntimeError: forced"))
    model = longrope_model()
    for prompt in prompts(3):
        assert racer_ref.generate(model, None, prompt, 50).token_ids == greedy_reference(model, prompt, 50)
    plan = model.racer_plan
    assert plan.mode == "chain" and plan.switch == (SWITCH,) and real(model)[1] == (SWITCH,)


# ----------------------------------------------------------------------------- found by a hostile trial
def _build(config_class: str, model_class: str, seed: int = 0, **kwargs) -> torch.nn.Module:
    import transformers

    torch.manual_seed(seed)
    config = getattr(transformers, config_class)(vocab_size=V, bos_token_id=None, eos_token_id=None, **kwargs)
    return _scaled(getattr(transformers, model_class)(config))


def test_gpt_neo_local_layers_run_chains_whatever_the_window():
    """Real GPT-Neo checkpoints alternate global and local layers (window 256): the probe's 11
    tokens fit in any window, so the config tells; past the window chains stay exact."""
    model = _build("GPTNeoConfig", "GPTNeoForCausalLM", hidden_size=64, num_layers=2, num_heads=4,
                   intermediate_size=128, attention_types=[[["global", "local"], 1]], window_size=16,
                   max_position_embeddings=256, pad_token_id=0)
    for prompt in prompts(3):
        assert racer_ref.generate(model, None, prompt, 30).token_ids == greedy_reference(model, prompt, 30)
    assert model.racer_plan.mode == "chain" and "local attention layers (window_size 16)" in model.racer_plan.cause


def test_roberta_decoders_get_positions_counted_from_zero_as_generate_gives_them():
    """RoBERTa counts its own positions from padding_idx + 1; generate passes 0-based ones, and
    so does every pass of racer_ref (the prefill included)."""
    model = _build("RobertaConfig", "RobertaForCausalLM", hidden_size=64, num_hidden_layers=2,
                   num_attention_heads=4, intermediate_size=128, max_position_embeddings=258, is_decoder=True,
                   pad_token_id=1)
    for prompt in [[t if t > 2 else 5 for t in p] for p in (REPEAT, prompts(2)[1])]:
        want = greedy_reference(model, prompt, 30)
        assert racer_ref.generate(model, None, prompt, 30).token_ids == want
        assert racer_ref.generate(model, None, prompt, 30, method="ar").token_ids == want


@pytest.mark.parametrize("order", ["longrope-first", "longrope-last"])
def test_longrope_in_one_layer_type_is_found_in_any_order(order):
    rope = {"full_attention": dict(rope_type="longrope", rope_theta=10000.0, original_max_position_embeddings=SWITCH,
                                   short_factor=[1.0 + 0.1 * i for i in range(8)],
                                   long_factor=[2.0 + 0.3 * i for i in range(8)]),
            "sliding_attention": dict(rope_type="default", rope_theta=10000.0)}
    if order == "longrope-last":
        rope = dict(reversed(list(rope.items())))
    model = _build("Gemma3TextConfig", "Gemma3ForCausalLM", hidden_size=64, intermediate_size=128,
                   num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                   max_position_embeddings=160, layer_types=["full_attention", "full_attention"],
                   sliding_window=4096, rope_parameters=rope, pad_token_id=0)
    for prompt in prompts(3):
        assert racer_ref.generate(model, None, prompt, 40).token_ids == greedy_reference(model, prompt, 40)
    assert model.racer_plan.switch == (SWITCH,)


def test_a_phi3_subclass_keeps_the_cache_rebuild():
    from transformers import Phi3ForCausalLM

    class MyPhi3(Phi3ForCausalLM):
        def prepare_inputs_for_generation(self, *args, **kwargs):
            return super().prepare_inputs_for_generation(*args, **kwargs)

    base = longrope_model()
    model = MyPhi3(base.config).eval()
    model.load_state_dict(base.state_dict())
    model.generation_config = base.generation_config
    for prompt in prompts(3):
        assert racer_ref.generate(model, None, prompt, 50).token_ids == greedy_reference(model, prompt, 50)
    assert model.racer_plan.rebuild == SWITCH


def test_auto_capacity_on_an_offloaded_model_and_on_a_model_without_a_kv_cache():
    accelerate = pytest.importorskip("accelerate")
    model = tiny_model("llama")
    want = greedy_reference(model, REPEAT, 30)
    accelerate.cpu_offload(model, execution_device="cpu")
    assert racer_ref.generate(model, None, REPEAT, 30, capacity="auto").token_ids == want
    rwkv = _build("RwkvConfig", "RwkvForCausalLM", hidden_size=64, num_hidden_layers=2, attention_hidden_size=64,
                  intermediate_size=128, context_length=256)
    calls = []
    with pytest.raises(ValueError, match="model: RwkvForCausalLM keeps no transformers KV cache"):
        racer_ref.generate(rwkv, None, REPEAT, 30, capacity="auto", callback=calls.append)
    assert calls == []


def test_a_model_that_takes_no_attributes_is_probed_each_call_and_announced_once(caplog):
    from transformers import MptConfig, MptForCausalLM

    class Frozen(MptForCausalLM):
        def __setattr__(self, name, value):
            if name.startswith("racer"):
                raise AttributeError(f"frozen: {name}")
            super().__setattr__(name, value)

    torch.manual_seed(0)
    model = _scaled(Frozen(MptConfig(vocab_size=V, d_model=64, n_heads=4, n_layers=2, max_seq_len=256)))
    want = greedy_reference(model, REPEAT, 20)
    with caplog.at_level(logging.WARNING, logger="racer_ref"):
        for _ in range(3):
            assert racer_ref.generate(model, None, REPEAT, 20).token_ids == want
    assert len([r for r in caplog.records if "chain drafts" in r.getMessage()]) == 1
    assert not hasattr(model, "racer_plan")


def test_a_plan_made_in_training_mode_is_made_again_after_eval():
    model = tiny_model("gpt2")
    model.train()
    racer_ref.generate(model, None, [1, 2, 3], 4)
    trained = model.racer_plan
    model.eval()
    out = racer_ref.generate(model, None, REPEAT, 30).token_ids
    assert model.racer_plan is not trained and model.racer_plan.mode == "tree"
    assert out == greedy_reference(model, REPEAT, 30)


def test_the_baseline_counts_one_token_for_generates_cache_rebuild():
    """model.generate's own steps on a Phi-3 past the LongRoPE switch: the rebuild call starts
    from an empty cache and still commits one token (the CLI's hf-greedy MAT stays 1)."""
    from racer_ref.harness.baselines import tokens_per_step

    calls = [[10, 0, 0.0], [1, 10, 0.0], [1, 11, 0.0], [13, 0, 0.0], [1, 13, 0.0], [1, 14, 0.0]]
    assert tokens_per_step(calls, 10, 6) == [1, 1, 1, 1, 1]
