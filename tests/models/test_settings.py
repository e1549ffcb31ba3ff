"""Training settings declared once (models/settings.py): the fingerprints of models trained before
stay the same, the CLI options and checks come from the declaration."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from odqa.flows.cli.settings_options import settings_from, settings_options
from odqa.flows.compositions.recipe import FINGERPRINTED as RECIPE_FINGERPRINTED
from odqa.flows.stages.train import train_params
from odqa.models.config import ARCHS, CHECKPOINT_ARCHS, DESIRE_ME_ARCHS
from odqa.models.settings import RetrieverSettings, TrainSettings
from odqa.storage.fingerprint import fingerprint

# (retriever, training, train, dev, gpus) -> the stage fingerprint `odqa train` gave these options
# before the settings were declared once (its parameter dict, spelled out in flows/stages/train.py then).
TRAINED_BEFORE = [
    ({"arch": "dpr", "base": "bert-base-uncased"}, {"max_steps": 100}, ["nq:train"], None, 1,
     "cfcce6726d8bed74d639cbd557d337946da4c8a11bd1d346338cd6ef274b5670"),
    ({"arch": "taser", "base": "x", "routing": "tok", "num_experts": 4},
     {"epochs": 3, "batch_size": 8, "lr": 1e-5, "hard_negatives": 2, "seed": 3, "eval_every": 50, "warmup_steps": 0,
      "amp": "bf16"}, ["trex:train:2", "nq:train"], "trex:dev", 2,
     "6f34d33684008c2f04f115a7a4385d325d60e02a75d5dd0d1e4ab007b7095848"),
    ({"arch": "sde", "base": "x", "passage_input": "joined-lowercase", "pooling": "mean"},
     {"max_steps": 10, "amp": "none", "bucket_tokens": 2048, "grad_cache": True, "mask_duplicates": True,
      "layer_decay": 0.8, "temperature": 0.05, "objective": "stopgrad", "accumulation_steps": 2,
      "threads": 2, "checkpoint_minutes": 5.0, "snapshot_every": 3}, ["nq:train"], None, 1,
     "38d1e67da16d6af88cb229fb5289185035d6ec96b9fec2e7de783368fd070800"),
    ({"arch": "desire-me", "base": "m"}, {"max_steps": 10, "loss_weights": [0.5, 0.5]}, ["nq:train"], None, 1,
     "af284bb8a1f195c4739bc13dbe8c03b2abf28565327b8b27d03849cce9043734"),
]  # fmt: skip

# (retriever, training) -> the part of `odqa train-rounds`' fingerprint its settings gave before.
RECIPES_BEFORE = [
    ({"arch": "taser", "base": "b"}, {"max_steps": 5},
     "070f7cac2090eff3a5dd769009d460e481aa03fefbca296571afe5f489d714c0"),
    ({"arch": "dpr", "base": "b"}, {"epochs": 2, "amp": "bf16", "bucket_tokens": 512, "grad_cache": True,
                                    "mask_duplicates": True, "batch_size": 4, "seed": 1},
     "c5cb58e07890c16ef5bc160cce1931c6a117bd1a0b8897d233cbf9aaf486c8fa"),
]  # fmt: skip


@pytest.mark.parametrize(("retriever", "training", "train", "dev", "gpus", "expected"), TRAINED_BEFORE)
def test_models_trained_before_keep_their_fingerprint(retriever, training, train, dev, gpus, expected, monkeypatch):
    # "auto" precision that changed since (bf16 CPUs) enters on its own; these options ask for none
    monkeypatch.setattr("odqa.flows.stages.train.changed_auto_precision", lambda amp: None)
    settings = RetrieverSettings(**retriever), TrainSettings(**training)
    # Options that leave buckets at their default give the old fingerprint (such a model stays
    # current); a model trained with buckets asked for has it under the defaults of its time,
    # which the train flow accepts as current (`current_fingerprint`).
    earlier = "bucket_tokens" in training
    assert fingerprint("train-m", train_params(*settings, train, dev, gpus, earlier=earlier)) == expected


@pytest.mark.parametrize(("retriever", "training", "expected"), RECIPES_BEFORE)
def test_recipes_run_before_keep_their_fingerprint(retriever, training, expected):
    retriever_settings, train_settings = RetrieverSettings(**retriever), TrainSettings(**training)
    params = {**retriever_settings.fingerprint_params(RECIPE_FINGERPRINTED),
              **train_settings.fingerprint_params(RECIPE_FINGERPRINTED, earlier="bucket_tokens" in training)}
    assert fingerprint(params) == expected


def test_buckets_are_the_default_and_can_be_turned_off():
    assert TrainSettings(max_steps=1).bucket_tokens == 2048
    off = TrainSettings(max_steps=1, bucket_tokens=None)
    assert off.fingerprint_params(()) == {"max_steps": 1, "bucket_tokens": None}  # off is now the choice made
    assert off.fingerprint_params((), earlier=True) == {"max_steps": 1}  # as unbucketed models had it

    @click.command()
    @settings_options(TrainSettings, only=["bucket_tokens"])
    def show(**options):
        click.echo(repr(settings_from(TrainSettings, {**options, "max_steps": 1}).bucket_tokens))

    runner = CliRunner()
    assert runner.invoke(show, []).output.strip() == "2048"
    assert runner.invoke(show, ["--bucket-tokens", "none"]).output.strip() == "None"
    assert runner.invoke(show, ["--bucket-tokens", "512"]).output.strip() == "512"
    assert "x>=1" in runner.invoke(show, ["--bucket-tokens", "0"]).output


def test_a_checkpoint_begun_before_a_default_changed_continues_with_its_own_value():
    now = TrainSettings(max_steps=4)
    for config in ({"bucket_tokens": None, "max_steps": 4}, {"max_steps": 4}):  # recorded, or before the option
        kept, names = now.continuing(config)
        assert (kept.bucket_tokens, names) == (None, ["bucket_tokens"])
    assert now.continuing({"bucket_tokens": 2048}) == (now, [])
    # a value the user chose is theirs: the checkpoint's older default does not replace it
    chosen = TrainSettings(max_steps=4, bucket_tokens=512)
    assert chosen.continuing({"bucket_tokens": None}) == (chosen, [])


def test_a_new_option_enters_the_fingerprint_only_when_set():
    plain = TrainSettings(max_steps=1)
    assert "mask_duplicates" not in plain.fingerprint_params(())
    assert TrainSettings(max_steps=1, mask_duplicates=True).fingerprint_params(()) == {"max_steps": 1,
                                                                                        "mask_duplicates": True}
    assert TrainSettings(max_steps=1, threads=4).fingerprint_params(()) == {"max_steps": 1}  # speed only


def test_archs_are_the_families_union_and_desire_me_needs_a_retriever():
    assert set(ARCHS) == set(CHECKPOINT_ARCHS) | set(DESIRE_ME_ARCHS)
    assert RetrieverSettings(arch="taser", base="b", num_experts=3).model_options()["num_experts"] == 3
    assert "routing" not in RetrieverSettings(arch="dpr", base="b").model_options()
    assert RetrieverSettings(arch="desire-me", base="m").model_options(["a"])["domains"] == ["a"]
    with pytest.raises(ValueError, match="arch"):
        RetrieverSettings(arch="colbert", base="b")


def test_cli_options_come_from_the_declaration():
    @click.command()
    @settings_options(TrainSettings)
    def command(**options):
        click.echo(settings_from(TrainSettings, options).model_dump_json())

    ran = CliRunner().invoke(command, ["--max-steps", "3", "--amp", "bf16", "--bucket-tokens", "64",
                                       "--loss-weights", "0.5", "0.5", "--accumulation", "2"])  # fmt: skip
    assert ran.exit_code == 0, ran.output
    settings = TrainSettings.model_validate_json(ran.output)
    assert (settings.amp, settings.bucket_tokens, settings.loss_weights, settings.accumulation_steps) == (
        "bf16", 64, [0.5, 0.5], 2)
    assert "'fp8' is not one of" in CliRunner().invoke(command, ["--max-steps", "3", "--amp", "fp8"]).output
    both = CliRunner().invoke(command, ["--max-steps", "3", "--epochs", "1"])
    assert both.exit_code == 2 and "exactly one of max_steps" in both.output
    assert "needs bucket_tokens" in command.get_help(click.Context(command))
