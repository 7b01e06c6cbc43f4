"""The model zoo: names, determinism, errors."""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest
import torch

from pipeplan.costmodel.zoo import ZooError, build_model, get_model, list_models


def test_names_are_listed_and_case_insensitive() -> None:
    names = [m.name for m in list_models()]
    assert names[:4] == ["mlp", "rescnn", "tinygpt", "inception"]
    assert {"gpt2", "bert-base", "vit-base", "resnet-50"} <= set(names)
    assert get_model("GPT2").name == "gpt2"


def test_every_catalogue_entry_has_a_builder() -> None:
    from pipeplan.costmodel.zoo.build import _SMALL
    from pipeplan.costmodel.zoo.hf import HF_MODELS
    from pipeplan.costmodel.zoo.llm import LLM_MODELS

    catalogue = {m.family + ("/meta" if m.meta else ""): set() for m in list_models()}
    for m in list_models():
        catalogue[m.family + ("/meta" if m.meta else "")].add(m.name)
    assert catalogue == {"builtin": set(_SMALL), "transformers": set(HF_MODELS), "transformers/meta": set(LLM_MODELS)}


def test_listing_the_zoo_does_not_import_torch() -> None:
    code = ("import sys; from pipeplan.costmodel.zoo import get_model, list_models; "
            "print(len(list_models()), get_model('gpt2').inputs, 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == [str(len(list_models())), "tokens", "False"]


def test_unknown_name_lists_the_valid_ones() -> None:
    with pytest.raises(ZooError, match=r"unknown model 'gpt5'.*tinygpt"):
        build_model("gpt5")


@pytest.mark.parametrize("kwargs, match", [({"batch_size": 0}, "batch size"),
                                            ({"seq_len": 0}, "seq_len"),
                                            ({"seq_len": 1000}, "up to 256")])
def test_bad_sizes(kwargs: dict, match: str) -> None:
    with pytest.raises(ZooError, match=match):
        build_model("tinygpt", **kwargs)


def test_same_seed_same_model_and_input() -> None:
    a, b = build_model("tinygpt", 2, seed=3), build_model("tinygpt", 2, seed=3)
    assert torch.equal(a.args[0], b.args[0])
    with torch.no_grad():
        assert torch.equal(a.model(*a.args), b.model(*b.args))
    c = build_model("tinygpt", 2, seed=4)
    assert not torch.equal(a.args[0], c.args[0])


def test_input_shapes_follow_options() -> None:
    assert tuple(build_model("rescnn", 3, image_size=16).args[0].shape) == (3, 3, 16, 16)
    assert tuple(build_model("tinygpt", 2, seq_len=10).args[0].shape) == (2, 10)


@pytest.mark.slow
def test_transformers_model_returns_logits_tensor() -> None:
    built = build_model("resnet-50", 1, image_size=64)
    with torch.no_grad():
        out = built.model(*built.args)
    assert isinstance(out, torch.Tensor) and tuple(out.shape) == (1, 1000)
    assert type(built.model).__name__ == "ResNetForImageClassification"
    # A stage process finds the swapped class by reference, without having built one first.
    fresh = subprocess.run([sys.executable, "-c", "import pickle, sys; cls = pickle.loads(sys.stdin.buffer.read()); "
                            "print(cls.__module__, cls.__qualname__, cls.__mro__[1].__module__)"],
                           input=pickle.dumps(type(built.model)), capture_output=True, check=True)
    assert fresh.stdout.decode().split() == ["pipeplan.costmodel.zoo.hf", "FirstOutputResNetForImageClassification",
                                             "transformers.models.resnet.modeling_resnet"]
