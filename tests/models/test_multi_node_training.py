"""`odqa train --nodes 2 --node-rank R --rdzv-endpoint HOST:PORT`: two torchrun launches meet in a
c10d rendezvous (here both on 127.0.0.1, gloo) and train the weights one process trains on the
same global batch."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from odqa.flows.stages.train import Launch
from odqa.models.data import write_examples
from odqa.models.job import TrainingJob, TrainSet, run_job
from odqa.models.trainer import TrainingConfig

PER_NODE = 2
LR = 5e-4
REPO = Path(__file__).parents[2]


def _job(folder: Path, checkpoint: str, examples: Path, batch_size: int) -> Path:
    # hard_negatives=2 takes every hard negative of the toy set (no sampling differs by rank);
    # the tiny checkpoint has no dropout.
    training = TrainingConfig(output_dir=str(folder / "out"), batch_size=batch_size, hard_negatives=2, max_steps=3,
                              lr=LR, warmup_steps=0, seed=5, amp="none", checkpoint_minutes=None, progress=False)
    job = TrainingJob(arch="dpr", base=checkpoint, training=training, train_sets=[TrainSet("toy", str(examples))],
                      result_path=str(folder / "result.json"))  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    job.write(folder / "job.json")
    return folder / "job.json"


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    files = sorted(folder.rglob("*.safetensors"))
    assert files, f"no weights under {folder}"
    return {f"{f.relative_to(folder)}:{k}": v for f in files for k, v in load_file(str(f)).items()}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_launch_checks_its_nodes_and_names_the_rendezvous() -> None:
    with pytest.raises(ValueError, match="needs --rdzv-endpoint HOST:PORT"):
        Launch(nodes=2)
    with pytest.raises(ValueError, match="--node-rank must be 0..1"):
        Launch(nodes=2, node_rank=2, rdzv_endpoint="10.0.0.5:29400")
    command = Launch(gpus=4, nodes=2, node_rank=1, rdzv_endpoint="10.0.0.5:29400").torchrun("job.json", "m1")
    assert "--standalone" not in command and "--nnodes=2" in command and "--rdzv-backend=c10d" in command
    assert "--rdzv-endpoint=10.0.0.5:29400" in command and "--rdzv-conf=is_host=0" in command
    assert "--nproc_per_node=4" in command
    assert "--standalone" in Launch(gpus=2).torchrun("job.json", "m1")


@pytest.mark.slow
def test_two_nodes_train_the_weights_of_one_process_on_the_global_batch(tiny_checkpoint, toy_examples,
                                                                         tmp_path: Path) -> None:  # fmt: skip
    examples = tmp_path / "toy.parquet"
    write_examples(toy_examples, examples)
    single = _job(tmp_path / "single", tiny_checkpoint, examples, 2 * PER_NODE)
    run_job(TrainingJob.read(single))

    job = _job(tmp_path / "nodes", tiny_checkpoint, examples, PER_NODE)
    endpoint = f"127.0.0.1:{_free_port()}"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    nodes = [subprocess.Popen(Launch(1, 2, rank, endpoint).torchrun(str(job), "two-node-test"), cwd=REPO, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for rank in (0, 1)]  # fmt: skip
    outputs = [node.communicate(timeout=300)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
    assert any("--rdzv-backend" in " ".join(n.args) for n in nodes)

    import json

    trained = {name: json.loads((tmp_path / name / "result.json").read_text())["model_dir"]
               for name in ("single", "nodes")}  # fmt: skip
    expected, got = _weights(Path(trained["single"])), _weights(Path(trained["nodes"]))
    assert set(got) == set(expected) and expected
    # Two kinds of weights have a true gradient of 0, so AdamW turns their rounding noise (another
    # for a sum over two ranks) into full-size steps: the attention key biases (they add the same
    # number to every score of a query) and the passage tower's last LayerNorm bias (it adds the
    # same vector to every passage, so the same number to every score of a question). The softmax
    # cancels both. Every other weight must agree.
    zero_gradient = ("attention.self.key.bias", "passage_tower.encoder.encoder.layer.2.output.LayerNorm.bias")
    compared = {name: tensor for name, tensor in expected.items() if not name.endswith(zero_gradient)}
    assert len(compared) > len(expected) // 2
    base = load_file(str(Path(tiny_checkpoint) / "model.safetensors"))
    tower = "model.safetensors:question_tower.encoder."
    moved = [(tensor - base[name[len(tower):]]).abs().max().item() for name, tensor in compared.items()
             if name.startswith(tower) and name[len(tower):] in base]  # fmt: skip
    assert moved and max(moved) > 1e-4, "training did not change the weights"
    # The sums over ranks round differently, and AdamW's m/sqrt(v) turns that into a step of up to
    # a few % of lr where a gradient is near 0 (seen: 1.9e-5 = 4% of lr, once in a suite); a
    # wrong global batch moves weights by whole steps (lr each).
    differences = sorted(((got[name] - tensor).abs().max().item(), name) for name, tensor in compared.items())
    assert differences[-1][0] <= 0.1 * LR, f"largest differences {differences[-8:]}"
