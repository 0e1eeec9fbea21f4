"""Holds kube-score's and checkov's JSON reports on the chart's renders against accepted.txt.

Usage: classify.py ACCEPTED_FILE REPORT_DIR (lint.sh runs it with checkov's venv python).
REPORT_DIR holds kube-score-<render>.json and checkov-<render>.json for the renders default and
full. Prints every finding that accepted.txt does not accept, every accepted.txt entry that
matches no finding (stale), and one summary line per tool and render; exits 1 if either list is
not empty.

A finding is one check failing on one object (Kind/name): for kube-score one comment of a check
graded Critical or Warning (a check may comment on several things, e.g. container-resources on a
missing CPU limit and on a missing memory limit), for checkov one failed check on a resource.

accepted.txt: one entry a line, columns separated by '|':
  tool | check | render | object | reason
tool is kube-score or checkov; check is kube-score's test ID, optionally followed by ': ' and the
comment's summary (then only that comment is accepted), or checkov's check ID; render is default,
full or *; object is a Kind/name glob (fnmatch); reason says why the finding stays.
"""

import fnmatch
import json
import sys
from dataclasses import dataclass
from pathlib import Path

RENDERS = ("default", "full")
TOOLS = ("kube-score", "checkov")
# kube-score's grades (scorecard.Grade): 1 critical, 5 warning, 7 almost OK, 10 OK.
CRITICAL, WARNING = 1, 5


@dataclass
class Entry:
    line: int
    tool: str
    check: str
    render: str
    obj: str
    reason: str
    used: bool = False

    def matches(self, tool: str, check: str, summary: str, render: str, obj: str) -> bool:
        return (
            self.tool == tool
            and self.check in (check, f"{check}: {summary}")
            and (self.render == "*" or self.render == render)
            and fnmatch.fnmatchcase(obj, self.obj)
        )


@dataclass
class Finding:
    tool: str
    render: str
    check: str
    obj: str
    level: str
    summary: str
    path: str = ""


def read_accepted(path: Path) -> list[Entry]:
    entries = []
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split("|", 4)]
        if len(parts) < 5 or parts[0] not in TOOLS or parts[2] not in (*RENDERS, "*") or not all(parts):
            sys.exit(f"{path.name}:{n}: want 'kube-score|checkov | <check> | default|full|* | <Kind/name glob> | <reason>'")
        entries.append(Entry(n, *parts))
    return entries


def kube_score_findings(render: str, report: list) -> list[Finding]:
    out = []
    for o in report:
        obj = f"{o['type_meta']['kind']}/{o['object_meta']['name']}"
        for c in o["checks"]:
            if c["skipped"] or c["grade"] > WARNING:
                continue
            level = "critical" if c["grade"] <= CRITICAL else "warning"
            for x in c.get("comments") or [{"summary": c["check"]["name"]}]:
                out.append(Finding("kube-score", render, c["check"]["id"], obj, level, x["summary"], x.get("path", "")))
    return out


def checkov_object(resource: str) -> str:
    # Kind.namespace.name (graph checks on pod templates append the pod's labels after the name).
    parts = resource.split(".")
    return f"{parts[0]}/{parts[2] if len(parts) > 2 else parts[-1]}"


def checkov_report(report) -> dict:
    # One framework: one report object; no resources at all: an empty summary.
    if isinstance(report, list):
        report = next((r for r in report if r.get("check_type") == "kubernetes"), {})
    return report


def main() -> int:
    accepted_path, out = Path(sys.argv[1]), Path(sys.argv[2])
    entries = read_accepted(accepted_path)
    bad = 0
    summaries = []

    def accept(f: Finding) -> bool:
        hit = [e for e in entries if e.matches(f.tool, f.check, f.summary, f.render, f.obj)]
        for e in hit:
            e.used = True
        return bool(hit)

    for render in RENDERS:
        ks = kube_score_findings(render, json.loads((out / f"kube-score-{render}.json").read_text()))
        open_ = [f for f in ks if not accept(f)]
        for f in open_:
            where = f" (container {f.path})" if f.path else ""
            print(f"kube-score {render}: {f.level.upper()} {f.obj}{where} {f.check}: {f.summary}")
        bad += len(open_)
        crit = sum(f.level == "critical" for f in open_)
        summaries.append(
            f"kube-score {render}: {crit} critical, {len(open_) - crit} warning "
            f"({len(ks) - len(open_)} skipped as documented)"
        )

        ck = checkov_report(json.loads((out / f"checkov-{render}.json").read_text() or "{}"))
        summary = ck.get("summary", {})
        if summary.get("parsing_errors"):
            print(f"checkov {render}: {summary['parsing_errors']} parsing errors")
            bad += 1
        failed = [
            Finding("checkov", render, c["check_id"], checkov_object(c["resource"]), "failed", c["check_name"])
            for c in ck.get("results", {}).get("failed_checks", [])
        ]
        open_ = [f for f in failed if not accept(f)]
        for f in open_:
            print(f"checkov {render}: FAILED {f.obj} {f.check}: {f.summary}")
        bad += len(open_)
        summaries.append(
            f"checkov {render}: {summary.get('passed', 0)} passed, {len(open_)} failed, "
            f"{len(failed) - len(open_) + summary.get('skipped', 0)} skipped"
        )

    for e in entries:
        if not e.used:
            print(f"{accepted_path.name}:{e.line}: {e.tool} | {e.check} | {e.render} | {e.obj}: matches no finding, remove it")
            bad += 1
    print("\n".join(summaries))
    if bad:
        print(f"chart-lint: {bad} finding(s) neither fixed nor accepted in {accepted_path.name}")
        return 1
    print(f"chart-lint: every finding fixed or accepted in {accepted_path.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
