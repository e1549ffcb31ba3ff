"""fixtures/trec_run.json: how trec_eval's own C code reads tricky TREC run files.

python tests/conformance/generate/trec_run.py TREC_EVAL_CHECKOUT > tests/conformance/fixtures/trec_run.json

TREC_EVAL_CHECKOUT is a checkout of usnistgov/trec_eval. The script compiles trec_eval's run
reader (`get_trec_results.c`, `te_get_trec_results`) and its ranking (`form_res_rels.c`,
`te_form_res_rels`: score descending, ties broken by docno, duplicate docnos refused) with a
small driver written here, and records, per case, each question's passages in trec_eval's rank
order with their scores and the run tag, or what trec_eval stops with. The driver learns the
rank order by giving each passage a distinct relevance level (its index among the question's
passages) and reading `results_rel_list`, trec_eval's relevance of each rank.
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

DRIVER = r"""
#include "common.h"
#include "sysfunc.h"
#include "trec_eval.h"
#include "trec_format.h"
#include <stdio.h>
#include <string.h>

int te_get_trec_results(EPI *epi, char *text_results_file, ALL_RESULTS *all_results);
int te_form_res_rels(const EPI *epi, const REL_INFO *rel_info, const RESULTS *results, RES_RELS *res_rels);

int main(int argc, char **argv) {
    EPI epi;
    ALL_RESULTS all;
    memset(&epi, 0, sizeof epi);
    epi.relevance_level = 1;
    epi.max_num_docs_per_topic = MAXLONG;
    if (UNDEF == te_get_trec_results(&epi, argv[1], &all)) return 2;
    for (long q = 0; q < all.num_q_results; q++) {
        RESULTS *results = &all.results[q];
        TEXT_RESULTS_INFO *info = (TEXT_RESULTS_INFO *) results->q_results;
        TEXT_QRELS *qrels = malloc(info->num_text_results * sizeof(TEXT_QRELS));
        for (long i = 0; i < info->num_text_results; i++) {   /* already in docno order */
            qrels[i].docno = info->text_results[i].docno;
            qrels[i].rel = i;
        }
        TEXT_QRELS_INFO judged = {info->num_text_results, info->num_text_results, qrels};
        REL_INFO rel_info = {results->qid, "qrels", &judged};
        RES_RELS res_rels;
        if (UNDEF == te_form_res_rels(&epi, &rel_info, results, &res_rels)) return 3;
        printf("Q\t%s\t%s\n", results->qid, results->run_id);
        for (long r = 0; r < res_rels.num_ret; r++) {
            TEXT_RESULTS *hit = &info->text_results[res_rels.results_rel_list[r]];
            printf("D\t%s\t%.17g\n", hit->docno, hit->sim);
        }
    }
    return 0;
}
"""
SOURCES = ("get_trec_results.c", "form_res_rels.c", "utility_pool.c")

CASES = {
    "spaces and tabs": "q1 Q0 d1 1 2.5 run\nq1\tQ0\td2\t2\t1.5\trun\nq2  Q0  d3  1  0.5  run\n",
    "crlf and no final newline": "q1 Q0 d1 1 2.5 run\r\nq1 Q0 d2 2 1.5 run\r\nq2 Q0 d3 1 0.5 run",
    "blank lines and comments": "# a comment line\nq1 Q0 d1 1 2.5 run\n\n   \nq1 Q0 d2 2 1.5 run\n  # indented comment\n",
    "columns after the tag": "q1 Q0 d1 1 2.5 run extra columns\nq1 Q0 d2 2 1.5 run\n",
    "scores out of rank order": "q1 Q0 d1 1 0.5 run\nq1 Q0 d2 2 3.0 run\nq1 Q0 d3 3 -1e2 run\nq1 Q0 d4 4 1E-3 run\n",
    "non-ascii ids and a non-breaking space": "q\u00e9 Q0 d\u00e9\u0301 1 2.5 run\nq1 Q0 d\u00a0x 1 1.5 run\n",
    "vertical tab and form feed": "q1\x0bQ0\x0cd1 1 2.5 run\n",
    "carriage return inside a line": "q1 Q0 d1\r1 2.5 run\n",
    # The reference departs here; odqa's behaviour for each is in the test (DEPARTURES).
    "tied scores": "q1 Q0 a 1 1.0 run\nq1 Q0 c 2 1.0 run\nq1 Q0 b 3 1.0 run\n",
    "score that is not a number": "q1 Q0 d1 1 2.5 run\nq1 Q0 d2 2 Queequeg run\n",
    "score with trailing text": "q1 Q0 d1 1 2.5abc run\n",
    "score with underscores": "q1 Q0 d1 1 1_0 run\n",
    "rank that is not a number": "q1 Q0 d1 x 2.5 run\n",
    "passage listed twice": "q1 Q0 d1 1 2.5 run\nq1 Q0 d1 2 1.5 run\n",
    "five columns": "q1 Q0 d1 1 2.5\n",
}


def build(checkout: Path, scratch: Path) -> Path:
    (scratch / "driver.c").write_text(DRIVER)
    binary = scratch / "read_run"
    subprocess.run(["gcc", "-O1", "-w", f"-I{checkout}", "-o", str(binary), str(scratch / "driver.c"),
                    *(str(checkout / s) for s in SOURCES), "-lm"], check=True)  # fmt: skip
    return binary


def read_case(binary: Path, content: str, scratch: Path) -> dict:
    path = scratch / "case.trec"
    path.write_bytes(content.encode("utf-8"))
    done = subprocess.run([str(binary), str(path)], capture_output=True)
    case = {"content": content}
    if done.returncode:
        case["error"] = done.stderr.decode("utf-8", "replace").strip()
        return case
    ranking, tag = {}, None
    for line in done.stdout.decode("utf-8").splitlines():
        kind, first, second = line.split("\t")
        if kind == "Q":
            current, tag = ranking.setdefault(first, []), second
        else:
            current.append([first, float(second)])
    case["records"] = {"ranking": ranking, "tag": tag}
    return case


with tempfile.TemporaryDirectory() as scratch_dir:
    scratch = Path(scratch_dir)
    binary = build(Path(sys.argv[1]), scratch)
    json.dump(
        {
            "reference": "trec_eval's te_get_trec_results + te_form_res_rels (usnistgov/trec_eval)",
            "trec_run": {name: read_case(binary, content, scratch) for name, content in CASES.items()},
        },
        sys.stdout,
        indent=1,
        ensure_ascii=True,
    )
sys.stdout.write("\n")
