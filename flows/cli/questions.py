"""`odqa questions trex|paq|holdout`: template questions from Wikidata facts, PAQ samples, held-out
training questions."""

from __future__ import annotations

import click

from ...storage.choices import TREX_SPLITS
from .groups import SEED, questions_group, workspace_arg
from .numbers import FiniteRange
from .report import echo_report

WIKIDATA = "https://query.wikidata.org/sparql"

@questions_group.command("trex")
@click.option("--sparql", metavar="URL", help=f"SPARQL endpoint to query ('wikidata' = {WIKIDATA}).")
@click.option("--trex", type=click.Path(exists=True), help="T-REx JSON file or folder of them.")
@click.option("--triples", type=click.Path(exists=True, dir_okay=False), help="JSON Lines file, one triple per line.")
@click.option("--templates", type=click.Path(exists=True, dir_okay=False), required=True,
              help="relation_query_templates.json (EntityQuestions format).")
@click.option("--dataset", required=True, help="Dataset name the questions are stored under.")
@click.option("--relations", multiple=True, metavar="PID",
              help="Relations to use (repeat or comma-separate; default: the thesis' 14, or every templated one with --splits none).")
@click.option("--sample-per-relation", type=click.IntRange(min=1), default=None,
              help="Facts per relation, deterministic under --seed (default: all from files, 20000 from SPARQL).")
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--splits", type=click.Choice(list(TREX_SPLITS)), default="thesis", show_default=True,
              help="thesis: seen relations 80/10/10, unseen relations 10% test_unseen, 4 analysis sets.")
@click.option("--split", default=None, help="With --splits none: the one split every question goes to.")
@click.option("--size-per-relation", type=click.IntRange(min=1), default=10_000, show_default=True,
              help="Facts per relation the thesis splits are made of (Table 3.1).")
@click.option("--analysis-per-relation", type=click.IntRange(min=0), default=300, show_default=True)
@click.option("--page-size", type=click.IntRange(min=1), default=1000, show_default=True, help="SPARQL rows per request.")
@click.option("--retries", type=click.IntRange(min=0), default=5, show_default=True, help="SPARQL retries per request (429/5xx/timeouts).")
@click.option("--timeout", type=FiniteRange(min=0, min_open=True), default=120.0, show_default=True, help="SPARQL request timeout, seconds.")
@click.option("--user-agent", default=None,
              help="User-Agent for SPARQL requests; Wikidata asks for one naming the tool and a contact.")
@click.pass_context
def questions_trex(ctx: click.Context, sparql: str | None, trex: str | None, triples: str | None, templates: str,
                   dataset: str, relations: tuple[str, ...], sample_per_relation: int | None, seed: int, splits: str,
                   split: str | None, size_per_relation: int, analysis_per_relation: int, page_size: int, retries: int,
                   timeout: float, user_agent: str | None) -> None:
    """Template questions from (subject, relation, object) facts, split as in the thesis."""
    from ..stages.questions import trex_questions_flow

    wanted = [r.strip() for value in relations for r in value.split(",") if r.strip()] or None
    report = trex_questions_flow(
        templates=templates, dataset=dataset, sparql=WIKIDATA if sparql == "wikidata" else sparql, trex=trex,
        triples=triples, relations=wanted, sample_per_relation=sample_per_relation, seed=seed, splits=splits,
        split=split, size_per_relation=size_per_relation, analysis_per_relation=analysis_per_relation,
        page_size=page_size, sparql_retries=retries, sparql_timeout=timeout, workspace=workspace_arg(ctx),
        **({"user_agent": user_agent} if user_agent else {}),
    )
    echo_report("questions trex", report)


@questions_group.command("paq")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--dataset", default="paq", show_default=True)
@click.option("--passages", type=click.IntRange(min=1), default=100_000, show_default=True, help="Passages to sample (one question each).")
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--min-questions", type=click.IntRange(min=1), default=3, show_default=True, help="Keep passages with at least this many.")
@click.option("--negatives", type=click.IntRange(min=0), default=1, show_default=True, help="Negative questions per flipped row.")
@click.option("--memory-limit", default="1GB", show_default=True, help="DuckDB memory for the grouping.")
@click.pass_context
def questions_paq(ctx: click.Context, file: str, dataset: str, passages: int, seed: int, min_questions: int,
                  negatives: int, memory_limit: str) -> None:
    """Sample PAQ metadata FILE (.jsonl or .jsonl.gz) as in the thesis, plus the flipped variant."""
    from ..stages.questions import paq_questions_flow

    report = paq_questions_flow(path=file, dataset=dataset, passages=passages, seed=seed, min_questions=min_questions,
                                negatives=negatives, memory_limit=memory_limit, workspace=workspace_arg(ctx))
    echo_report("questions paq", report)



@questions_group.command("holdout")
@click.option("--dataset", required=True, help="Dataset of the training questions.")
@click.option("--split", required=True, help="The training split, e.g. train (it stays as it was).")
@click.option("--fraction", type=FiniteRange(min=0, max=1, min_open=True, max_open=True), default=0.1,
              show_default=True, help="Share of the questions held out; the rest are trained on.")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Which questions are held out (with their ids).")
@click.option("--fit-split", default=None, help="Name of the split trained on (default: SPLIT-fit).")
@click.option("--tune-split", default=None, help="Name of the held-out split (default: SPLIT-tune).")
@click.pass_context
def questions_holdout(ctx: click.Context, dataset: str, split: str, fraction: float, seed: int, fit_split: str | None,
                      tune_split: str | None) -> None:  # fmt: skip
    """Hold out a share of a training split to tune on (the hybrid's alpha: odqa tune-hybrid --dev
    DATASET:SPLIT-tune), train on the rest (DATASET:SPLIT-fit), as odqa train-rounds does."""
    from ..stages.holdout import holdout_flow

    report = holdout_flow(dataset=dataset, split=split, fraction=fraction, seed=seed, fit_split=fit_split,
                          tune_split=tune_split, workspace=workspace_arg(ctx))  # fmt: skip
    echo_report("questions holdout", report)
