"""Issue 32 item 7: the architecture sweep, kept as a test matrix.

``racer_ref.generate`` (greedy, the default) promises the tokens of
``model.generate(do_sample=False)`` on any transformers causal LM, or a ``ValueError`` naming
the model (or the cause) before any work. Here each architecture is a tiny seeded random
model built from its config (2 layers, hidden 64, 4 heads, vocabulary 128), in the house
style of ``models.tiny_model``: weights of two or more dimensions scaled up so that greedy
output is neither constant nor a float near-tie.

* :data:`ARCHITECTURES`: must return ``model.generate``'s tokens on a few prompts (seeded
  random ids, and one made of a repeated random chunk), each output varied (more than two
  distinct tokens), with drafts accepted on at least one of them (trees really verified),
  in the mode :data:`CHAINS` says (``racer_ref.exactness``: trees unless listed there).
* :data:`REFUSALS`: must raise ``ValueError`` matching the given pattern (naming the model
  or the cause), with no forward pass and no ``callback`` call.
* :data:`PROBE_REFUSALS`: models that keep their own state instead of a KV cache: refused by
  the exactness probe (a few forward passes of its own), naming the model, before the prompt
  is decoded (no ``callback`` call).

The doc table docs/reference/models.md ("Which families run trees, chains, or are refused")
lists the same architectures: keep the two in step.
"""

from __future__ import annotations

import functools
from typing import Any, Dict, List, Tuple

import numpy as np
import pytest
import torch

from models import single_thread  # noqa: F401  (autouse: one thread)
from racer_ref import generate

VOCAB = 128
#: The context length of the models (for those that have one), well beyond prompt + output.
POSITIONS = 256
#: Scale of the weights of two or more dimensions (as models.tiny_model, whose 3 leaves a few
#: of these architectures constant or nearly so).
SCALE = 5.0
#: Prompts per architecture: (seed, prompt length, new tokens); a seed < 0 is a prompt of a
#: repeated random chunk (the drafts should be accepted there).
PROMPTS = ((1, 12, 24), (2, 20, 32), (-3, 28, 40))

#: Common to the attention stacks of the Llama-like configs.
LLAMA_LIKE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=POSITIONS)
#: A LongRoPE head dim of 16 takes 8 factors each (head_dim / 2).
LONGROPE = dict(rope_type="longrope", rope_theta=10000.0, original_max_position_embeddings=40,
                short_factor=[1.0, 1.1, 1.2, 1.3, 1.5, 1.7, 2.0, 2.4],
                long_factor=[1.0, 1.3, 1.7, 2.2, 2.9, 3.6, 4.4, 5.0])

#: name -> (config class, model class, config keyword arguments), all in ``transformers``.
ARCHITECTURES: Dict[str, Tuple[str, str, Dict[str, Any]]] = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(LLAMA_LIKE)),
    "llama-yarn": ("LlamaConfig", "LlamaForCausalLM", dict(
        LLAMA_LIKE, rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=4.0,
                                         original_max_position_embeddings=64))),
    "llama-llama3-rope": ("LlamaConfig", "LlamaForCausalLM", dict(
        LLAMA_LIKE, rope_parameters=dict(rope_type="llama3", rope_theta=10000.0, factor=8.0, low_freq_factor=1.0,
                                         high_freq_factor=4.0, original_max_position_embeddings=64))),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(LLAMA_LIKE, head_dim=16, use_sliding_window=False,
                                                      sliding_window=None)),
    "qwen3-moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", dict(
        LLAMA_LIKE, head_dim=16, moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2,
        decoder_sparse_step=1, use_sliding_window=False, sliding_window=None)),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", dict(LLAMA_LIKE, num_local_experts=4, num_experts_per_tok=2,
                                                            sliding_window=None)),
    "deepseek-v3-mla": ("DeepseekV3Config", "DeepseekV3ForCausalLM", dict(
        LLAMA_LIKE, num_key_value_heads=4, moe_intermediate_size=32, n_shared_experts=1, n_routed_experts=4,
        num_experts_per_tok=2, n_group=1, topk_group=1, first_k_dense_replace=1, q_lora_rank=32, kv_lora_rank=16,
        qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16)),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", dict(LLAMA_LIKE)),
    "starcoder2": ("Starcoder2Config", "Starcoder2ForCausalLM", dict(LLAMA_LIKE, sliding_window=None)),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", dict(n_embd=64, n_layer=2, n_head=4, n_positions=POSITIONS)),
    "gptj": ("GPTJConfig", "GPTJForCausalLM", dict(n_embd=64, n_layer=2, n_head=4, rotary_dim=8,
                                                   n_positions=POSITIONS)),
    "codegen": ("CodeGenConfig", "CodeGenForCausalLM", dict(n_embd=64, n_layer=2, n_head=4, rotary_dim=8,
                                                            n_positions=POSITIONS, n_ctx=POSITIONS)),
    "gpt-neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM", dict(hidden_size=64, intermediate_size=128,
                                                             num_hidden_layers=2, num_attention_heads=4,
                                                             max_position_embeddings=POSITIONS)),
    "phi": ("PhiConfig", "PhiForCausalLM", dict(LLAMA_LIKE)),
    "persimmon": ("PersimmonConfig", "PersimmonForCausalLM", dict(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=POSITIONS)),
    "gpt-bigcode": ("GPTBigCodeConfig", "GPTBigCodeForCausalLM", dict(n_embd=64, n_layer=2, n_head=4,
                                                                      n_positions=POSITIONS)),
    "opt": ("OPTConfig", "OPTForCausalLM", dict(hidden_size=64, ffn_dim=128, num_hidden_layers=2,
                                                num_attention_heads=4, word_embed_proj_dim=64,
                                                max_position_embeddings=POSITIONS)),
    "xglm": ("XGLMConfig", "XGLMForCausalLM", dict(d_model=64, ffn_dim=128, num_layers=2, attention_heads=4,
                                                   max_position_embeddings=POSITIONS)),
    "biogpt": ("BioGptConfig", "BioGptForCausalLM", dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                                         num_attention_heads=4, max_position_embeddings=POSITIONS)),
    # GPT-Neo alternates global and local (windowed) layers by default: global only here.
    "gpt-neo": ("GPTNeoConfig", "GPTNeoForCausalLM", dict(hidden_size=64, num_layers=2, num_heads=4,
                                                          intermediate_size=128, attention_types=[[["global"], 2]],
                                                          max_position_embeddings=POSITIONS)),
    "falcon-rope": ("FalconConfig", "FalconForCausalLM", dict(hidden_size=64, num_hidden_layers=2,
                                                              num_attention_heads=4, alibi=False,
                                                              max_position_embeddings=POSITIONS)),
    "granite-moe": ("GraniteMoeConfig", "GraniteMoeForCausalLM", dict(
        LLAMA_LIKE, intermediate_size=32, num_local_experts=4, num_experts_per_tok=2)),
    "nemotron": ("NemotronConfig", "NemotronForCausalLM", dict(LLAMA_LIKE, head_dim=16)),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", dict(LLAMA_LIKE, original_max_position_embeddings=POSITIONS,
                                                   sliding_window=None)),
    # Beyond issue 32's list: full-attention families found to work as well.
    "gemma": ("GemmaConfig", "GemmaForCausalLM", dict(LLAMA_LIKE, head_dim=16)),
    "cohere": ("CohereConfig", "CohereForCausalLM", dict(LLAMA_LIKE)),
    "ctrl": ("CTRLConfig", "CTRLLMHeadModel", dict(n_embd=64, n_layer=2, n_head=4, dff=128, n_positions=POSITIONS)),
    # A sliding_window that the config does not use (use_sliding_window=False): full attention.
    "qwen2-window-unused": ("Qwen2Config", "Qwen2ForCausalLM", dict(LLAMA_LIKE, use_sliding_window=False,
                                                                    sliding_window=8)),
    # ALiBi: chain drafts.
    "mpt-alibi": ("MptConfig", "MptForCausalLM", dict(d_model=64, n_heads=4, n_layers=2, expansion_ratio=2,
                                                      max_seq_len=POSITIONS)),
    "bloom-alibi": ("BloomConfig", "BloomForCausalLM", dict(hidden_size=64, n_layer=2, n_head=4)),
    "falcon-alibi": ("FalconConfig", "FalconForCausalLM", dict(hidden_size=64, num_hidden_layers=2,
                                                               num_attention_heads=4, alibi=True,
                                                               max_position_embeddings=POSITIONS)),
    # LongRoPE switches from the short to the long factors past original_max_position_embeddings
    # (40): prompts of 28 tokens and 50 new ones cross it.
    "phi3-longrope": ("Phi3Config", "Phi3ForCausalLM", dict(
        LLAMA_LIKE, max_position_embeddings=160, original_max_position_embeddings=40, sliding_window=None,
        rope_parameters=LONGROPE)),
    # Found by this sweep to differ with trees; the probe sends them to chain drafts.
    "gpt-neo-local": ("GPTNeoConfig", "GPTNeoForCausalLM", dict(
        hidden_size=64, num_layers=2, num_heads=4, intermediate_size=128, attention_types=[[["global", "local"], 1]],
        window_size=8, max_position_embeddings=POSITIONS)),
    "bart-causal": ("BartConfig", "BartForCausalLM", dict(
        d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
        encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=POSITIONS)),
}

#: Architectures that decode with chain drafts, and why (in the plan's cause). ALiBi takes
#: positions from cache slots, and a tree mask replaces the window of GPT-Neo's local layers
#: (both known from the config); BartForCausalLM (whose forward takes no position ids) fails
#: the probe's tree pass.
CHAINS = {"mpt-alibi": "ALiBi", "bloom-alibi": "ALiBi", "falcon-alibi": "ALiBi",
          "gpt-neo-local": "local attention layers", "bart-causal": "the same path's"}

#: name -> (seed, scale) where the defaults (0, :data:`SCALE`) give a (nearly) constant output.
TUNED = {"phi": (1, 4.0), "nemotron": (0, 8.0)}

#: Prompts of an architecture when not :data:`PROMPTS`.
OWN_PROMPTS = {"phi3-longrope": ((1, 28, 50), (2, 28, 50), (-3, 28, 50))}

SLIDING = "cache: layer type DynamicSlidingWindowLayer is not supported"
LINEAR = "cache: layer type LinearAttention(AndFullAttention)?Layer is not supported"
#: name -> (config class, model class, config keyword arguments, the ValueError's pattern).
REFUSALS: Dict[str, Tuple[str, str, Dict[str, Any], str]] = {
    # Sliding-window (or chunked) attention layers.
    "mistral-sliding": ("MistralConfig", "MistralForCausalLM", dict(LLAMA_LIKE, sliding_window=16), SLIDING),
    # (a window far beyond the sequence is refused too: the layout decides, not the length)
    "mistral-sliding-4096": ("MistralConfig", "MistralForCausalLM", dict(LLAMA_LIKE, sliding_window=4096), SLIDING),
    "qwen2-sliding": ("Qwen2Config", "Qwen2ForCausalLM", dict(LLAMA_LIKE, use_sliding_window=True, sliding_window=16,
                                                              max_window_layers=0), SLIDING),
    "qwen3-sliding": ("Qwen3Config", "Qwen3ForCausalLM", dict(LLAMA_LIKE, head_dim=16, use_sliding_window=True,
                                                              sliding_window=16, max_window_layers=0), SLIDING),
    "mixtral-sliding": ("MixtralConfig", "MixtralForCausalLM", dict(LLAMA_LIKE, num_local_experts=4,
                                                                    num_experts_per_tok=2, sliding_window=16), SLIDING),
    "starcoder2-sliding": ("Starcoder2Config", "Starcoder2ForCausalLM", dict(LLAMA_LIKE, sliding_window=16), SLIDING),
    "phi3-sliding": ("Phi3Config", "Phi3ForCausalLM", dict(LLAMA_LIKE, original_max_position_embeddings=POSITIONS,
                                                           sliding_window=16), SLIDING),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", dict(LLAMA_LIKE, head_dim=16, sliding_window=16), SLIDING),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(LLAMA_LIKE, head_dim=16, sliding_window=16), SLIDING),
    "cohere2": ("Cohere2Config", "Cohere2ForCausalLM", dict(LLAMA_LIKE, head_dim=16, sliding_window=16), SLIDING),
    "gpt-oss": ("GptOssConfig", "GptOssForCausalLM", dict(LLAMA_LIKE, head_dim=16, sliding_window=16,
                                                          num_local_experts=4, num_experts_per_tok=2), SLIDING),
    "llama4-chunked": ("Llama4TextConfig", "Llama4ForCausalLM", dict(
        LLAMA_LIKE, head_dim=16, attention_chunk_size=16, num_local_experts=2, num_experts_per_tok=1,
        intermediate_size_mlp=128), SLIDING),
    # State-space and linear-attention layers, alone or with attention.
    "mamba": ("MambaConfig", "MambaForCausalLM", dict(hidden_size=64, num_hidden_layers=2, state_size=4),
              "model: MambaForCausalLM has no attention layers"),
    "mamba2": ("Mamba2Config", "Mamba2ForCausalLM", dict(hidden_size=64, num_hidden_layers=2, num_heads=8, head_dim=16,
                                                         state_size=8, n_groups=1),
               "model: Mamba2ForCausalLM has no attention layers"),
    "falcon-mamba": ("FalconMambaConfig", "FalconMambaForCausalLM", dict(hidden_size=64, num_hidden_layers=2,
                                                                         state_size=4),
                     "model: FalconMambaForCausalLM has no attention layers"),
    "recurrent-gemma": ("RecurrentGemmaConfig", "RecurrentGemmaForCausalLM", dict(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
        lru_width=64, attention_window_size=8), "model: RecurrentGemmaForCausalLM has no attention layers"),
    "qwen3-next": ("Qwen3NextConfig", "Qwen3NextForCausalLM", dict(
        LLAMA_LIKE, num_hidden_layers=4, head_dim=16, num_experts=2, num_experts_per_tok=1, moe_intermediate_size=32,
        shared_expert_intermediate_size=32, linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=16,
        linear_value_head_dim=16), LINEAR),
    "jamba": ("JambaConfig", "JambaForCausalLM", dict(
        LLAMA_LIKE, num_experts=2, num_experts_per_tok=1, attn_layer_period=2, attn_layer_offset=1,
        expert_layer_period=2, expert_layer_offset=1, mamba_d_state=4, mamba_expand=2, use_mamba_kernels=False),
              LINEAR),
    "falcon-h1": ("FalconH1Config", "FalconH1ForCausalLM", dict(
        LLAMA_LIKE, mamba_d_ssm=64, mamba_n_heads=4, mamba_d_head=16, mamba_d_state=8, mamba_n_groups=1), LINEAR),
    "zamba2": ("Zamba2Config", "Zamba2ForCausalLM", dict(
        hidden_size=64, num_hidden_layers=2, layer_types=["mamba", "hybrid"], num_attention_heads=4, mamba_d_state=8,
        mamba_headdim=16, n_mamba_heads=8, max_position_embeddings=POSITIONS, use_mem_eff_path=False), LINEAR),
    # Encoder-decoder models.
    "t5": ("T5Config", "T5ForConditionalGeneration", dict(d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4),
           "model: encoder-decoder models are not supported"),
    "bart": ("BartConfig", "BartForConditionalGeneration", dict(
        d_model=64, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4, decoder_attention_heads=4,
        encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=POSITIONS),
             "model: encoder-decoder models are not supported"),
}

#: Models that keep their own state, not a KV cache: the exactness probe's passes fail, and
#: the model is refused by name. name -> (config class, model class, config keyword arguments).
PROBE_REFUSALS: Dict[str, Tuple[str, str, Dict[str, Any]]] = {
    "rwkv": ("RwkvConfig", "RwkvForCausalLM", dict(hidden_size=64, num_hidden_layers=2, attention_hidden_size=64,
                                                   intermediate_size=128, context_length=POSITIONS)),
    "reformer": ("ReformerConfig", "ReformerModelWithLMHead", dict(
        is_decoder=True, hidden_size=64, attention_head_size=16, num_attention_heads=4, attn_layers=["local", "local"],
        feed_forward_size=128, axial_pos_embds=False, max_position_embeddings=POSITIONS)),
}


def build(config_class: str, model_class: str, kwargs: Dict[str, Any], seed: int = 0,
          scale: float = SCALE) -> torch.nn.Module:
    """A seeded random model of ``model_class`` in eval mode, as ``models.tiny_model`` builds them.

    The output embedding is untied from the input one: tied, the residual stream of a random
    model is dominated by the input token's embedding, so that it predicts its own input
    token (constant output) on about half of these architectures."""
    import transformers

    torch.manual_seed(seed)
    config = getattr(transformers, config_class)(vocab_size=VOCAB, bos_token_id=None, eos_token_id=None,
                                                 pad_token_id=None, tie_word_embeddings=False, **kwargs)
    model = getattr(transformers, model_class)(config)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() >= 2:
                param.mul_(scale)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model.eval()


@functools.lru_cache(maxsize=None)
def architecture(name: str) -> torch.nn.Module:
    """The model of architecture ``name``, built once per process."""
    return build(*ARCHITECTURES[name], *TUNED.get(name, ()))


def prompt_of(seed: int, length: int) -> List[int]:
    """Seeded random ids; a negative seed repeats a random chunk of 7 (drafts to accept)."""
    rng = np.random.default_rng(abs(seed))
    if seed >= 0:
        return rng.integers(0, VOCAB, size=length).tolist()
    chunk = rng.integers(0, VOCAB, size=7).tolist()
    return (chunk * (length // 7 + 1))[:length]


def reference(model: torch.nn.Module, prompt: List[int], new: int) -> List[int]:
    """``model.generate(do_sample=False)``'s new tokens: the oracle."""
    with torch.no_grad():
        ids = torch.tensor([prompt])  # (the mask: generate would mask the pad id 0 out of the prompt)
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, do_sample=False)
    return out[0, len(prompt):].tolist()


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_greedy_equals_model_generate(name: str):
    model = architecture(name)
    cases = [(seed, prompt_of(seed, length), new) for seed, length, new in OWN_PROMPTS.get(name, PROMPTS)]
    # All references first: on a CPU generate() may switch a grouped-query model's attention.
    expected = {seed: reference(model, prompt, new) for seed, prompt, new in cases}
    results = []
    for seed, prompt, new in cases:
        # Not degenerate: the comparison means something only if the output varies.
        assert len(set(expected[seed])) > 2, f"{name}: output {expected[seed]} is (nearly) constant"
        result = generate(model, None, prompt, new)
        assert result.token_ids == expected[seed], f"{name}: prompt seed {seed}"
        results.append(result)
    # The drafts were accepted somewhere (the repeated chunk), so trees were really verified.
    assert any(a > 0 for r in results for a in r.accepted_lengths), f"{name}: no draft was ever accepted"
    plan = model.racer_plan
    assert plan.mode == ("chain" if name in CHAINS else "tree"), plan
    assert name not in CHAINS or CHAINS[name] in plan.cause
    if name == "phi3-longrope":
        assert plan.switch == (40,) and plan.rebuild == 40


@pytest.mark.parametrize("name", list(REFUSALS))
def test_refused_by_name_before_any_work(name: str):
    config_class, model_class, kwargs, pattern = REFUSALS[name]
    model = build(config_class, model_class, kwargs)
    calls: List[Any] = []
    forwards: List[int] = []
    hook = model.register_forward_pre_hook(lambda *a: forwards.append(1))
    try:
        with pytest.raises(ValueError, match=pattern):
            generate(model, None, prompt_of(1, 12), 8, callback=calls.append)
    finally:
        hook.remove()
    assert calls == [] and forwards == []


@pytest.mark.parametrize("name", list(PROBE_REFUSALS))
def test_models_without_a_kv_cache_are_refused_by_the_probe(name: str):
    model = build(*PROBE_REFUSALS[name])
    calls: List[Any] = []
    with pytest.raises(ValueError, match=f"model: {type(model).__name__} keeps no transformers KV cache"):
        generate(model, None, prompt_of(-3, 28), 40, callback=calls.append)
    assert calls == []


def test_a_sliding_window_refusal_names_the_model():
    config_class, model_class, kwargs, _ = REFUSALS["mistral-sliding"]
    model = build(config_class, model_class, kwargs)
    with pytest.raises(ValueError, match=r"DynamicSlidingWindowLayer is not supported .*\(model: MistralForCausalLM\)$"):
        generate(model, None, prompt_of(1, 12), 8)
