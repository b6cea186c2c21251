"""``ledger items``: item files made from public datasets' own files, and checked.

Registered as the ``items`` entry point of ``prompt_ledger.commands`` (docs/adr/0004). ``import``
converts a MedMCQA, MedQA, PubMedQA, MedXpertQA or HealthCareMagic file into a JSONL item file
(:mod:`runner._importers`); ``check`` reads an item file exactly as ``ledger lock`` will
(:func:`runner._items.load_items`) and summarises it. Each command parses its options, makes one
library call and renders the result.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import click

from ledger.cliutil import Group, dump_json
from runner._importers import FORMATS
from runner._items import ItemSet

__all__ = ["check", "import_cmd", "items", "summary"]

_FIRST_MEMBERS = ("id", "question", "options", "answer")
_MOST_ANSWERS_LISTED = 12
_LONGEST_ANSWER_LISTED = 24


def summary(found: ItemSet) -> dict[str, Any]:
    """What ``ledger items check`` prints: count, digest, and how many items have each field.

    ``members`` counts the items having each member (``id``, ``question``, ``options``,
    ``answer`` first, then the others by name); ``options`` counts items by number of options;
    ``metadata`` counts items by metadata key; ``answers`` counts items by answer when there are
    at most 12 different answers, none longer than 24 characters (option labels,
    yes/no/maybe), else ``distinct_answers`` says how many different answers there are
    (free-text references).
    """
    members: Counter[str] = Counter()
    options: Counter[int] = Counter()
    metadata: Counter[str] = Counter()
    answers: Counter[str] = Counter()
    for item in found:
        members.update(item.data.keys())
        if item.options:
            options[len(item.options)] += 1
        metadata.update(item.metadata.keys())
        answers[item.answer] += 1
    order = [m for m in _FIRST_MEMBERS if m in members] + sorted(
        m for m in members if m not in _FIRST_MEMBERS
    )
    result: dict[str, Any] = {
        "path": str(found.path),
        "format": found.format,
        "count": len(found),
        "sha256": found.sha256,
        "members": {m: members[m] for m in order},
        "options": {str(n): options[n] for n in sorted(options)},
        "metadata": {k: metadata[k] for k in sorted(metadata)},
    }
    if len(answers) <= _MOST_ANSWERS_LISTED and all(
        len(a) <= _LONGEST_ANSWER_LISTED for a in answers
    ):
        result["answers"] = {a: answers[a] for a in sorted(answers)}
    else:
        result["distinct_answers"] = len(answers)
    return result


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _counts(counts: dict[str, int], unit: str = "") -> str:
    return ", ".join(f"{name}{unit} {n}" for name, n in counts.items()) or "none"


@click.group(cls=Group)
def items() -> None:
    """Make item files from public datasets, and check item files (docs/items.md).

    An item file (JSONL or CSV, docs/prompts.md section 1) holds the questions a study asks,
    each with its answer; [stimuli] items = "PATH" names it in study.toml.

    \b
    Example:
      ledger items import --format medmcqa dev.json my-study/items.jsonl
      ledger items check my-study/items.jsonl
    """


@items.command("import")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    required=True,
    help="The dataset SRC is from.",
)
@click.argument("src", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("dest", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Keep only the first N items (the whole of SRC is still checked).",
)
@click.option("--force", is_flag=True, help="Replace DEST if it exists.")
@click.option(
    "--id-prefix",
    default=None,
    metavar="TEXT",
    help="Put TEXT- before every item id (medqa and healthcaremagic: instead of medqa, hcm).",
)
@click.option(
    "--cop-base",
    type=click.Choice(["0", "1"]),
    default=None,
    help="medmcqa: cop counts from 0 (Hugging Face files) or 1 (GitHub release); default: "
    "told from the file.",
)
@click.option(
    "--metadata",
    "metadata",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    metavar="FILE",
    help='A JSON sidecar {"items": {"<item id>": {...}}} whose members are added '
    "to those items' metadata (e.g. reference sets).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def import_cmd(
    fmt: str,
    src: Path,
    dest: Path,
    limit: int | None,
    force: bool,
    id_prefix: str | None,
    cop_base: str | None,
    metadata: Path | None,
    as_json: bool,
) -> None:
    """Convert a public dataset's own file SRC into the JSONL item file DEST.

    Formats: medmcqa (JSON lines: dev.json, train.json), medqa (US JSON lines:
    test.jsonl, 4_options/phrases_no_exclude_test.jsonl), pubmedqa (ori_pqal.json),
    medxpertqa (Text/test.jsonl), healthcaremagic (HealthCareMagic-100k.json). Every record is
    checked; any problem is reported as SRC:LINE: what, and nothing is written. DEST is written
    whole or not at all and loaded back before it replaces anything; an existing DEST is
    replaced only with --force. docs/items.md gives each dataset's mapping.

    \b
    Example:
      ledger items import --format pubmedqa ori_pqal.json my-study/items.jsonl
      ledger items import --format medqa US/test.jsonl medqa-test.jsonl \\
          --id-prefix medqa-test
    """
    from runner._importers import import_dataset

    result = import_dataset(
        fmt,
        src,
        dest,
        limit=limit,
        force=force,
        id_prefix=id_prefix,
        cop_base=None if cop_base is None else int(cop_base),
        metadata=metadata,
    )
    if as_json:
        dump_json(
            {
                "format": result.format,
                "source": str(result.source),
                "dest": str(result.dest),
                "records": result.records,
                "count": len(result.items),
                "sha256": result.items.sha256,
            }
        )
        return
    click.echo(
        f"imported {_plural(len(result.items), 'item')} into {result.dest} from "
        f"{result.source} ({result.format}, {_plural(result.records, 'record')})"
    )
    click.echo(f"items digest: {result.items.sha256}")
    click.echo(f"next: ledger items check {result.dest}")


@items.command()
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def check(file: Path, as_json: bool) -> None:
    """Read the item file FILE as ledger lock will and summarise it.

    Prints the number of items, the items digest protocol.locked will record, and how many
    items have each field. A file with problems: each is printed as FILE:LINE: what, and the
    exit status is 1.

    \b
    Example:
      ledger items check my-study/items.jsonl
      ledger items check my-study/items.csv --json
    """
    from runner._errors import SpecError
    from runner._items import load_items

    try:
        found = load_items(file)
    except SpecError as exc:
        for problem in exc.problems:
            click.echo(problem, err=True)
        count = len(exc.problems)
        raise click.ClickException(
            f"{file}: {_plural(count, 'problem')}; fix the file and check it again"
        ) from None
    facts = summary(found)
    if as_json:
        dump_json(facts)
        return
    click.echo(f"{file}: {_plural(facts['count'], 'item')} ({facts['format']})")
    click.echo(f"items digest: {facts['sha256']}")
    click.echo(f"members: {_counts(facts['members'])}")
    if facts["options"]:
        click.echo(f"options: {_counts(facts['options'], ' options:')}")
    if facts["metadata"]:
        click.echo(f"metadata: {_counts(facts['metadata'])}")
    if "answers" in facts:
        click.echo(f"answers: {_counts(facts['answers'])}")
    else:
        click.echo(f"answers: {facts['distinct_answers']} different (free text)")
