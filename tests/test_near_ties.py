"""explain_difference: where two greedy outputs part, and the logit gap behind it (issue 15)."""

from __future__ import annotations

import torch

from models import greedy_reference, single_thread, tiny_model  # noqa: F401
from racer_ref.harness.bench import NEAR_TIE_RELATIVE, describe_difference, explain_difference

PROMPT = list(range(3, 12))


def test_equal_outputs_and_a_real_difference():
    model = tiny_model("llama")
    ref = greedy_reference(model, PROMPT, 8)
    assert explain_difference(model, PROMPT, ref, list(ref)) is None
    other = ref[:3] + [(ref[3] + 1) % 128] + ref[4:]
    d = explain_difference(model, PROMPT, ref, other)
    assert d["position"] == 3 and d["reference_token"] == ref[3] and d["other_token"] == other[3]
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([PROMPT + ref[:3]])).logits[0, -1]
    assert abs(d["reference_logit"] - float(logits[ref[3]])) < 1e-6
    assert d["logit_gap"] == abs(d["reference_logit"] - d["other_logit"]) > 0
    assert d["near_tie"] is False and "NOT a near-tie" in describe_difference(d)


def test_an_exact_tie_is_a_near_tie():
    model = tiny_model("llama")
    ref = greedy_reference(model, PROMPT, 6)
    twin = (ref[2] + 5) % 128
    with torch.no_grad():  # token `twin` gets the same output row as ref[2]: their logits tie everywhere
        model.lm_head.weight[twin] = model.lm_head.weight[ref[2]]
    ref = greedy_reference(model, PROMPT, 6)
    other = ref[:2] + [twin]
    d = explain_difference(model, PROMPT, ref, other)
    assert d["position"] == 2 and d["logit_gap"] == 0.0 and d["near_tie"] is True
    assert d["dtype"] == "float32" and NEAR_TIE_RELATIVE["float32"] == 1e-4
    assert "a near-tie" in describe_difference(d)


def test_one_output_a_prefix_of_the_other():
    model = tiny_model("llama")
    ref = greedy_reference(model, PROMPT, 6)
    d = explain_difference(model, PROMPT, ref, ref[:4])
    assert d["position"] == 4 and d["reference_token"] is None and d["near_tie"] is False
    assert "ends" in describe_difference(d)


def test_a_speedup_over_ar_above_the_mat_is_flagged():
    from racer_ref.harness.summary import implausible_speedups, summary_tables

    def row(method, wall, steps, prompt="1"):
        return {"method": method, "prompt_id": prompt, "category": "c", "new_tokens": 60, "steps": steps,
                "wall_s": wall, "matches_ar": True, "mean_accepted_tokens": 60 / steps,
                "accepted_lengths": [60 // steps - 1] * steps}

    honest = [row("ar", 6.0, 60), row("racer", 2.0, 20)]  # MAT 3, 3.0x: possible
    assert implausible_speedups(honest) == []
    assert "not to be trusted" not in summary_tables(honest)
    loaded = [row("ar", 6.0, 60), row("racer", 1.0, 20)]  # MAT 3, 6.0x: a measurement error
    (m, sp, mat), = implausible_speedups(loaded)
    assert (m, round(sp, 2), round(mat, 2)) == ("racer", 6.0, 3.0)
    assert "Timing figures not to be trusted" in summary_tables(loaded)
