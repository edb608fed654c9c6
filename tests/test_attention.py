"""``racer_ref.speedups.attention``: grouped-query tree attention without copying the KV cache."""

from __future__ import annotations

import pytest
import torch

from models import greedy_reference, make_tree, single_thread, tiny_model  # noqa: F401
from racer_ref.speedups import attention
from racer_ref.speedups.attention import SDPA_GQA, register, sdpa_gqa_attention_forward, use_sdpa_gqa
from racer_ref.decoding import generate
from racer_ref.verify import forward_prompt, forward_tree, tree_attention_bias

TOKENS = [5, 17, 17, 40, 3, 99, 12, 8]
PARENTS = [-1, 0, 0, 1, 1, 2, 3, 3]
PROMPT = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]


class Layer(torch.nn.Module):
    """What the function reads from an attention layer: its query heads per key/value head."""

    def __init__(self, groups: int) -> None:
        super().__init__()
        self.num_key_value_groups = groups
        self.is_causal = True


def tensors(groups=3, kv_heads=2, n=6, past=9, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, kv_heads * groups, n, 16, generator=g, dtype=dtype)
    k = torch.randn(1, kv_heads, past + n, 16, generator=g, dtype=dtype)
    v = torch.randn(1, kv_heads, past + n, 16, generator=g, dtype=dtype)
    parents = PARENTS[:n]
    mask = torch.as_tensor(make_tree(TOKENS[:n], parents).attention_mask)
    return q, k, v, tree_attention_bias(mask, past, dtype)


def record_sdpa(monkeypatch):
    """Record the keyword arguments of every PyTorch SDPA call."""
    calls = []
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    return calls


def test_tree_call_uses_the_grouped_kernel_and_equals_sdpa(monkeypatch):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    q, k, v, bias = tensors()
    expected, _ = sdpa_attention_forward(Layer(3), q, k, v, bias, scaling=0.25)  # repeats k, v
    calls = record_sdpa(monkeypatch)
    out, weights = sdpa_gqa_attention_forward(Layer(3), q, k, v, bias, scaling=0.25)
    assert weights is None and out.shape == (1, 6, 6, 16) and out.is_contiguous()
    assert [c.get("enable_gqa") for c in calls] == [True]
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-5)
    # and it is attention: node 0 (the root) sees the prefix and itself only
    keys = torch.cat([k[:, :, :9], k[:, :, 9:10]], dim=2).repeat_interleave(3, dim=1)
    values = torch.cat([v[:, :, :9], v[:, :, 9:10]], dim=2).repeat_interleave(3, dim=1)
    scores = (q[:, :, :1] @ keys.transpose(-1, -2)) * 0.25
    root = (scores.softmax(-1) @ values).transpose(1, 2)  # (1, 1, heads, 16)
    torch.testing.assert_close(out[:, :1], root, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("case", ["one query", "no mask", "dropout", "no groups", "position bias"])
def test_other_calls_go_to_transformers_sdpa_unchanged(case, monkeypatch):
    q, k, v, bias = tensors(groups=1 if case == "no groups" else 3, n=1 if case == "one query" else 6)
    kwargs = {"dropout": 0.1 if case == "dropout" else 0.0, "scaling": 0.25}
    if case == "no mask":
        bias = None
    if case == "position bias":
        kwargs["position_bias"] = torch.zeros(1, q.shape[1], q.shape[2], k.shape[2])
    seen = []

    def fallback(module, query, key, value, mask, **kw):
        seen.append((query, key, value, mask, kw))
        return "fallback", None

    monkeypatch.setattr(attention, "sdpa_attention_forward", fallback)
    layer = Layer(1 if case == "no groups" else 3)
    assert sdpa_gqa_attention_forward(layer, q, k, v, bias, **kwargs) == ("fallback", None)
    (query, key, value, mask, kw), = seen
    assert query is q and key is k and value is v and mask is bias
    assert kw["dropout"] == kwargs["dropout"] and kw["scaling"] == 0.25


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_tree_logits_and_greedy_output_match_sdpa(kind):
    plain, grouped = tiny_model(kind, attn="sdpa"), tiny_model(kind, attn=SDPA_GQA)
    assert grouped.config._attn_implementation == SDPA_GQA
    logits = []
    for model in (plain, grouped):
        from transformers import DynamicCache

        cache = DynamicCache(config=model.config)
        with torch.no_grad():
            forward_prompt(model, cache, torch.tensor(PROMPT))
            logits.append(forward_tree(model, cache, make_tree(TOKENS, PARENTS)))
    torch.testing.assert_close(logits[1], logits[0], atol=2e-5, rtol=1e-5)
    result = generate(grouped, None, PROMPT * 3, max_new_tokens=24)
    assert result.token_ids == greedy_reference(plain, PROMPT * 3, 24)
    assert max(result.accepted_lengths) >= 1  # multi-token tree passes did happen


def test_use_sdpa_gqa_switches_only_grouped_sdpa_models():
    llama = tiny_model("llama")  # 4 query heads over 2 key/value heads, sdpa
    assert use_sdpa_gqa(llama) is True and llama.config._attn_implementation == SDPA_GQA
    assert use_sdpa_gqa(llama) is True  # already switched: unchanged
    for model in (tiny_model("llama", attn="eager"), tiny_model("gpt2")):
        before = model.config._attn_implementation
        assert use_sdpa_gqa(model) is False and model.config._attn_implementation == before
    for fake in (torch.nn.Linear(2, 2), type("Fake", (), {"config": llama.config})()):
        with pytest.raises(TypeError, match="model: expected a transformers model"):
            use_sdpa_gqa(fake)


def test_registration_is_idempotent_and_reaches_transformers():
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    register()
    register()
    assert AttentionInterface._global_mapping[SDPA_GQA] is sdpa_gqa_attention_forward
    assert AttentionMaskInterface._global_mapping[SDPA_GQA] is sdpa_mask


def test_load_model_takes_sdpa_gqa(tmp_path):
    from racer_ref.harness.models import load_default_tokenizer, load_model

    tiny_model("qwen2").save_pretrained(tmp_path)
    load_default_tokenizer().save_pretrained(tmp_path)
    model, _ = load_model(tmp_path, attn_implementation=SDPA_GQA)
    assert model.config._attn_implementation == SDPA_GQA
    assert generate(model, None, PROMPT, max_new_tokens=6).token_ids == greedy_reference(model, PROMPT, 6)


# ---- generate() on a CPU: no KV copy per tree pass, the fast path told once --------------------


def test_generate_plugs_in_grouped_attention_without_kv_copies(monkeypatch):
    import transformers.integrations.sdpa_attention as hf_sdpa

    monkeypatch.delenv("RACER_REF_CPU_KERNELS", raising=False)
    model = tiny_model("llama", seed=3)  # sdpa, 4 query heads over 2 key/value heads
    assert model.config._attn_implementation == "sdpa"
    want = greedy_reference(model, PROMPT * 3, 24)  # stock model.generate, before the switch
    copies = []
    real = hf_sdpa.repeat_kv

    def counting(*args, **kwargs):
        copies.append(args[0].shape)
        return real(*args, **kwargs)

    monkeypatch.setattr(hf_sdpa, "repeat_kv", counting)
    result = generate(model, None, PROMPT * 3, max_new_tokens=24, method="racer")
    assert model.config._attn_implementation == SDPA_GQA
    assert result.token_ids == want
    assert max(result.tree_sizes) > 1  # tree passes ran
    assert copies == []  # no repeat_kv on any pass


def test_opt_out_leaves_the_model_as_it_is(monkeypatch):
    monkeypatch.setenv("RACER_REF_CPU_KERNELS", "off")
    model = tiny_model("llama", seed=4)
    generate(model, None, PROMPT, max_new_tokens=8)
    assert model.config._attn_implementation == "sdpa"


def test_the_fast_path_is_told_once(monkeypatch, caplog):
    import racer_ref.speedups.attention as options

    monkeypatch.delenv("RACER_REF_CPU_KERNELS", raising=False)
    monkeypatch.setattr(options, "_HINTED", False)
    model = tiny_model("llama", seed=5, attn="eager")
    with caplog.at_level("WARNING", logger="racer_ref"):
        generate(model, None, PROMPT, max_new_tokens=4)  # a toy: no notice
        assert not [r for r in caplog.records if "speed_up_model(model)" in r.getMessage()]
        model = tiny_model("llama", seed=5, attn="eager")
        monkeypatch.setattr(options, "HINT_MIN_PARAMETERS", model.num_parameters())  # as if a real model
        generate(model, None, PROMPT, max_new_tokens=4)
        generate(model, None, PROMPT, max_new_tokens=4)
        generate(tiny_model("llama", seed=5, attn="eager"), None, PROMPT, max_new_tokens=4)  # once per process
    hints = [r for r in caplog.records if "speed_up_model(model)" in r.getMessage()]
    assert len(hints) == 1
    assert "RACER_REF_CPU_KERNELS=off" in hints[0].getMessage()


def test_a_model_prepared_by_speed_up_model_keeps_its_attention(monkeypatch):
    monkeypatch.delenv("RACER_REF_CPU_KERNELS", raising=False)
    model = tiny_model("llama", seed=6)
    model.racer_cpu_kernels = object()  # what speed_up_model leaves (the CLI chose the attention: --attn sdpa)
    generate(model, None, PROMPT, max_new_tokens=8)
    assert model.config._attn_implementation == "sdpa"


def test_the_command_lines_cpu_kernels_off_leaves_the_model_as_it_is(monkeypatch):
    monkeypatch.delenv("RACER_REF_CPU_KERNELS", raising=False)
    model = tiny_model("llama", seed=6)
    model.racer_cpu_kernels_off = True  # what racer-ref --attn sdpa --cpu-kernels off leaves
    generate(model, None, PROMPT, max_new_tokens=8)
    assert model.config._attn_implementation == "sdpa"
    del model.racer_cpu_kernels_off
    generate(model, None, PROMPT, max_new_tokens=8)
    assert model.config._attn_implementation == SDPA_GQA  # without it, generate() switches
