"""`odqa demo`: the whole pipeline on the bundled sample, with training small enough for two CPU
cores; it doubles as a smoke test of every stage, and a second run finishes from cache.

The results table and the example queries are printed by the CLI (`flows/cli/demo.py`).
"""

from __future__ import annotations

from prefect import flow

from ...models.settings import TrainSettings
from ...storage import Workspace
from .pipeline import EvaluationSettings, PipelineReport, QuestionSettings, TrainingSettings, odqa_pipeline

DEMO_TRAINING = TrainingSettings(mine_count=10, mine_depth=50, settings=TrainSettings(max_steps=10, batch_size=8))


@flow(name="odqa-demo")
def demo_flow(
    workspace: str | None = None,
    training: TrainingSettings = DEMO_TRAINING,
    questions: QuestionSettings | None = None,
    evaluation: EvaluationSettings | None = None,
) -> PipelineReport:
    """The pipeline on the bundled sample (tiny training). The settings are parameters so tests
    can run the same path on a smaller pipeline."""
    return odqa_pipeline(workspace=str(Workspace.resolve(workspace).root), training=training,
                         questions=questions or QuestionSettings(), evaluation=evaluation or EvaluationSettings())  # fmt: skip
