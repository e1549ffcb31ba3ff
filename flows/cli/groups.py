"""The `odqa` command group and its sub-groups; verb modules attach commands to these.

Verb modules import their flows (and storage, pyarrow, Prefect) inside the command body, so
`odqa --help` and argument errors answer in a fraction of a second instead of paying for torch,
pyserini and Prefect imports.

The group callback sets up each call: the umask its files are created with (`flows.backend.
file_modes`: owner-only unless $ODQA_UMASK says otherwise), where log records go
(`flows.cli.terminal`: the terminal shows progress and summaries, Prefect's records go to
`<workspace>/logs/odqa.log`, `-v` shows them too). Each verb, once its arguments parsed, picks the Prefect server its flows report to
(`flows.cli.prefect_api`; `VerbCommand`): the workspace's long-lived server, started in the
background by the first verb that runs a flow. `./run server stop` (or `odqa server stop`) stops it.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from ...storage import choices, ids
from ..backend.auth import client_auth_string
from ..backend.file_modes import apply_umask
from ..backend.local_server import ServerPaths, registered_client, stamped_flow_runs
from ..plumbing.bounds import SEED_MAX
from .numbers import FiniteRange
from .prefect_api import PrefectApi, choose_prefect_api, server_lines
from .terminal import TerminalSession, open_session, workspace_root

if TYPE_CHECKING:
    from ...storage import Workspace


# Verbs that answer without a Prefect server: they report to the workspace's server only when it
# already runs and never start one.
SERVERLESS_VERBS = frozenset({"sql", "serve", "index plan", "server status", "server stop", "server reset",
                              "server list"})  # fmt: skip
# Verbs that run no flow at all, so they never look for a Prefect server (`odqa search` answers
# question after question in this process and writes nothing).
PREFECTLESS_VERBS = frozenset({"search", "init", "release show", "release pin"})
# Verbs that bring data in, and so may be the first verb of a workspace: they create and mark a new
# or empty folder (`storage.Workspace.resolve`). Every other verb needs a workspace odqa made
# (`Workspace.open_existing`), so a mistyped -w creates nothing; the verbs below need none at all.
CREATING_VERBS = frozenset({"demo", "fetch", "ingest wikipedia", "ingest categories", "import passages", "import questions",
                            "import run", "questions trex", "questions paq", "reindex", "reproduce"})  # fmt: skip
WORKSPACELESS_VERBS = frozenset({"init", "index plan", "server list", "server status", "server stop",
                                 "server reset"})  # fmt: skip


class VerbCommand(click.Command):
    """A verb: after its arguments are parsed (so `--help` and usage errors stay instant and start
    nothing), choose the Prefect server its flows report to, starting the workspace's one when
    the verb runs flows.

    ``precheck`` (a command's keyword): a check of the parsed arguments that needs more than one
    of them or reads the input (an import's file head, `pipelines.import_heads`); it runs
    first, so a refusal starts no server and creates no workspace."""

    def __init__(self, *args: Any, precheck: Callable[[dict[str, Any]], None] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.precheck = precheck

    def invoke(self, ctx: click.Context):
        refuse_undecodable(ctx)
        if self.precheck is not None:
            self.precheck(ctx.params)
        root = ctx.find_root()
        verb = " ".join(ctx.command_path.split()[1:])
        if root.obj is not None and verb not in WORKSPACELESS_VERBS:
            open_verb_workspace(root.obj.get("workspace"), creating=verb in CREATING_VERBS)
        if root.obj is not None and "prefect_api" not in root.obj and verb not in PREFECTLESS_VERBS:
            use_prefect(root, start=verb not in SERVERLESS_VERBS)
        return super().invoke(ctx)


def refuse_undecodable(ctx: click.Context) -> None:
    """Refuse, naming it escaped, an argument holding bytes that are not UTF-8 (a Latin-1 file
    name, say): Python holds them as surrogates, which the Prefect API (a flow run's parameters),
    the log and the tables cannot store, so the verb would fail later with a bare codec error."""
    for param in ctx.command.params:
        value = ctx.params.get(param.name or "")
        for text in value if isinstance(value, list | tuple) else [value]:
            if isinstance(text, str) and (shown := _escaped_if_not_utf8(text)) is not None:
                raise click.BadParameter(f"{shown} is not UTF-8 (shown escaped): odqa names paths and values in "
                                         "its logs and tables, which hold UTF-8 only; rename the file (or its folder)",
                                         ctx=ctx, param=param)  # fmt: skip


def _escaped_if_not_utf8(text: str) -> str | None:
    """`text` with its bytes that are not UTF-8 escaped (`\\xe9`), or None when it is all UTF-8."""
    try:
        text.encode("utf-8")
        return None
    except UnicodeEncodeError:
        try:
            return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:  # (a surrogate no file name decodes to)
            return text.encode("utf-8", "backslashreplace").decode("utf-8")


def open_verb_workspace(chosen: str | None, creating: bool) -> None:
    """Before anything else of a verb runs (its Prefect server included): a verb that brings data in
    opens the workspace for writing (a new or empty folder becomes one), any other one refuses a
    folder odqa did not make a workspace, creating nothing in it."""
    from ...storage import Workspace

    try:
        Workspace.resolve(chosen) if creating else Workspace.open_existing(chosen)
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise click.ClickException(str(exc)) from exc


class OdqaGroup(click.Group):
    """Turns an exception into one clear line (the traceback only with --debug / ODQA_DEBUG=1)."""

    command_class = VerbCommand
    group_class = type  # sub-groups are OdqaGroups, so their verbs are VerbCommands too

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except KeyboardInterrupt:
            click.echo("odqa: interrupted", err=True)
            sys.exit(130)
        except Exception as exc:
            if os.environ.get("ODQA_DEBUG") or (ctx.obj or {}).get("debug"):
                traceback.print_exc()
            click.echo(f"odqa: error: {exc}", err=True)
            session: TerminalSession | None = (ctx.obj or {}).get("terminal")
            if session is not None and session.log_written() and not session.verbose:
                click.echo(f"odqa: log: {session.log_path}", err=True)
            sys.exit(1)


@click.group(cls=OdqaGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--workspace",
    "-w",
    "workspace",
    default=None,
    metavar="DIR",
    help="Workspace directory (default: $ODQA_WORKSPACE, else ./workspace).",
)
@click.option("--verbose", "-v", is_flag=True,
              help="Also show Prefect's log records on the terminal (they always go to <workspace>/logs/odqa.log).")
@click.option("--debug", is_flag=True, help="Show full tracebacks on errors.")
@click.pass_context
def main(ctx: click.Context, workspace: str | None, verbose: bool, debug: bool) -> None:
    """odqa: open-domain QA retrievers from public sources, as Prefect flows over a DuckDB workspace.

    Verbs that run flows report to the workspace's Prefect server, started in the background on
    first use (UI at the address it prints); `odqa server stop` or `./run server stop` stops it."""
    # A flow run without a configured server starts a temporary one; on a busy 2-core machine
    # that can take longer than Prefect's 20 s default, which would fail every verb.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    ctx.ensure_object(dict)
    ctx.obj["workspace"] = workspace
    ctx.obj["debug"] = debug
    previous_umask = apply_umask()
    ctx.call_on_close(lambda: os.umask(previous_umask))  # an in-process caller gets its own back
    session = open_session(workspace_root(workspace), verbose)
    ctx.call_on_close(session.close)
    ctx.obj["terminal"] = session
    if verbose:
        ctx.call_on_close(lambda: click.echo(f"odqa: log: {session.log_path}", err=True))


def use_prefect(root: click.Context, start: bool) -> PrefectApi:
    """Choose this call's Prefect server (see `flows.cli.prefect_api`), export it for the flows,
    say on the terminal what starting it took, and register the call as the server's client."""
    session: TerminalSession = root.obj["terminal"]
    workspace = workspace_root(root.obj.get("workspace"))
    api = choose_prefect_api(workspace, start=start)
    root.obj["prefect_api"] = api
    if api.needs_export and api.url:
        session.set_env("PREFECT_API_URL", api.url)
        auth = client_auth_string(ServerPaths(workspace).home)  # set when the server requires it
        if auth is not None:
            session.set_env("PREFECT_API_AUTH_STRING", auth)
        if "prefect.settings" in sys.modules:  # an in-process caller imported Prefect already
            from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

            updates = {PREFECT_API_URL: api.url, **({PREFECT_API_AUTH_STRING: auth} if auth is not None else {})}
            root.with_resource(temporary_settings(updates))
        root.with_resource(registered_client(workspace))
        if start:  # its runs end Crashed by the next verb if it is killed (serverless verbs run no flow)
            root.with_resource(stamped_flow_runs())
    for line in server_lines(api, workspace):
        click.echo(f"odqa: {line}", err=True)
    if session.verbose:
        click.echo(f"odqa: {api.describe()}", err=True)
    return api


def prefect_api_of(ctx: click.Context) -> PrefectApi:
    """The Prefect server this call's flows report to (see `flows.cli.prefect_api`)."""
    root = ctx.find_root()
    return root.obj.get("prefect_api") or use_prefect(root, start=False)


def workspace_of(ctx: click.Context) -> Workspace:
    """The workspace chosen by the global option (the verb opened or created it already)."""
    from ...storage import Workspace

    return Workspace.open_existing(ctx.find_root().obj.get("workspace"))


def workspace_arg(ctx: click.Context) -> str:
    """The workspace path as a string, the form flows take as a parameter."""
    return str(workspace_of(ctx).root)


@main.group("ingest")
def ingest_group() -> None:
    """Bring raw public sources into the workspace (Wikipedia dump, category SQL dumps)."""


@main.group("import")
def import_group() -> None:
    """Import existing corpora, question sets and runs in standard formats."""


@main.group("export")
def export_group() -> None:
    """Export workspace tables in standard formats."""


@main.group("questions")
def questions_group() -> None:
    """Build question datasets: template questions from Wikidata facts, PAQ samples, held-out training questions."""


@main.group("label")
def label_group() -> None:
    """Derive labels from the ingested sources (domains from the Wikipedia category graph)."""


@main.group("bm25")
def bm25_group() -> None:
    """The Lucene BM25 index of the passages (pyserini; needs a JDK 21+)."""


@main.group("negatives")
def negatives_group() -> None:
    """Hard negatives for training, written to questions.hard_negative_ids."""


@main.group("positives")
def positives_group() -> None:
    """Positive passages for questions that bring only answers (distant supervision, as DPR did)."""


@main.group("index")
def index_group() -> None:
    """FAISS indexes of a model's passage embeddings."""


@main.group("release")
def release_group() -> None:
    """The published release that searchers serve: what it serves and why, its pinned default model."""


@main.group("plot")
def plot_group() -> None:
    """Plots written to <workspace>/plots."""


# Option texts several verbs share.
MODEL_HELP = "Model id of the models table, or a Hugging Face name / model folder."
INDEX_TYPES = list(choices.INDEX_TYPES)
RETRIEVER_CHOICES = list(choices.RETRIEVER_KINDS)
MATCH_CHOICES = list(choices.MATCH_CHOICES)
ON_DUPLICATE = list(choices.ON_DUPLICATE)
TRAINING_MODES = list(choices.TRAINING_MODES)
PASSAGE_FORMATS = list(choices.PASSAGE_FORMATS)
MATCH_HELP = "Answer matching: DPR's token match (string), regex (CuratedTREC), or auto by dataset name."
RUN_PASSAGES = list(choices.RUN_PASSAGES)
RUN_PASSAGES_HELP = ("Whose texts answers are matched in: the passages the run was retrieved from (run), or the "
                     "current passages (current).")  # fmt: skip
SIGNIFICANCE = FiniteRange(min=0, max=1, min_open=True, max_open=True)  # a test's alpha
SEED = click.IntRange(min=0, max=SEED_MAX)  # as the flows' `Seed`


NAME_RULE_HELP = ids.NAME_RULE[0].upper() + ids.NAME_RULE[1:] + "."


def checked_name(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A `--model-id` or `--run` option's value, refused at parse time when it breaks the name rule
    (`storage.ids`), before any server starts or work begins."""
    if value is None:
        return None
    try:
        return ids.check_model_id(value) if param.name == "model_id" else ids.check_run_name(value)
    except ids.IdRuleError as error:
        raise click.BadParameter(str(error)) from None


def passages_per_question(ctx: click.Context, param: click.Parameter, value: int) -> int:
    """A `--k` / `--depth` option's check: 1 to the one limit of every search (`ODQA_MAX_K`,
    `pipelines.search.limits`), refused before anything starts."""
    from ...pipelines.search.limits import checked_k

    try:
        return checked_k(value, f"--{param.name}")
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc


def parse_cutoffs(value: str) -> list[int]:
    """`--k 1,5,20,100` as a list of cut-offs (a usage error when malformed)."""
    from ...pipelines.evaluation.metrics import parse_ks

    try:
        return list(parse_ks(value))
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
