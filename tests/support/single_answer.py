"""Single-answer studies written from the docs, without a template (tests only)."""

from __future__ import annotations

import re
from pathlib import Path

from locations import REPO
from PIL import Image, ImageDraw

DOCS = REPO / "docs"


def example_blocks() -> dict[str, str]:
    """The example of ``docs/study-spec.md``: ``study.toml`` and each prompt file by path."""
    text = (DOCS / "study-spec.md").read_text(encoding="utf-8")
    example = text[text.index("## Example: an image rotation study") :]
    files = {
        path: body
        for path, body in re.findall(r"`(prompts/[\w.]+)`:\n\n```text\n(.*?)```", example, re.S)
    }
    files["study.toml"] = re.findall(r"```toml\n(.*?)```", example, re.S)[0]
    return files


def write_sources(directory: Path, count: int = 3) -> None:
    """Source images the right way up: a dark block in the upper part, a grey band below."""
    directory.mkdir(parents=True)
    for i in range(count):
        image = Image.new("L", (200, 160), 255)
        draw = ImageDraw.Draw(image)
        x = 30 + 50 * i
        draw.rectangle((x, 10, x + 40, 50), fill=0)
        draw.ellipse((60, 90, 140, 120), fill=180)
        image.save(directory / f"scan{i + 1}.png")


def rotation_study(root: Path) -> Path:
    """The rotation study of ``docs/study-spec.md``, built in ``root`` as the page says."""
    from runner._stimuli import rotate_images

    root.mkdir(parents=True)
    write_sources(root / "sources")
    rotate_images(root / "sources", root / "stimuli")
    for rel, body in example_blocks().items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body, encoding="utf-8")
    return root


YES_NO_MAYBE_SPEC = """\
[study]
id = "ynm-pilot"
title = "Yes, no or maybe: is every symbol on the chart an E?"

[model]
id = "claude-sonnet-4-6"
max_tokens = 16

[components]
question = "prompts/question.txt"
rule = "prompts/rule.txt"
note = "prompts/note.txt"

[arms.with-rule]
role = "full"
components = ["rule", "question"]

[arms.with-note]
role = "matched-control"
components = ["note", "question"]
differs_from = { arm = "with-rule", by = ["rule"] }

[arms."bare.1"]
role = "vehicle"
components = ["question"]

[stimuli]
directory = "stimuli"
truth = "stimuli/answers.csv"

[design]
replicates = 3
seed = 11
bootstrap_seed = 12
bootstrap_iterations = 200

[response]
parser = "yes-no-maybe"

[[hypotheses]]
id = "H1"
description = "The rule helps."
contrast = ["with-rule", "with-note"]
test = "lmm"
sides = "one-sided"
alpha = 0.05

[[hypotheses]]
id = "H2"
description = "The rule against no scaffold."
contrast = ["with-rule", "bare.1"]
test = "bootstrap"
alpha = 0.05
correction = "holm"
family = "secondary"

[[hypotheses]]
id = "H3"
description = "The note against no scaffold."
contrast = ["with-note", "bare.1"]
test = "independent-t"
alpha = 0.05
correction = "holm"
family = "secondary"

[[hypotheses]]
id = "H4"
description = "Rule and note within 30 points on every chart."
contrast = ["with-rule", "with-note"]
test = "equivalence"
margin_pp = 30

[[hypotheses]]
id = "H5"
description = "Per chart, the rule beats no scaffold."
contrast = ["with-rule", "bare.1"]
test = "paired-t"
alpha = 0.05

[[hypotheses]]
id = "H6"
description = "Wrong answers of the bare prompt are spread evenly."
contrast = ["bare.1", "with-rule"]
test = "chi-square"
alpha = 0.05

[analysis]
exclude_unparseable = true
"""

YES_NO_MAYBE_QUESTION = (
    "Is every symbol on this eye chart the letter E, turned one way or another? "
    "Answer yes, no or maybe.\n"
)


def yes_no_maybe_study(root: Path) -> Path:
    """A yes/no/maybe study on the tumbling-E probe set: is every symbol an E?

    The images are the seven probes of ``runner._stimuli``; the truth is an answer table
    ``stimulus,answer`` (yes for the six tumbling-E charts, no for the Snellen letters).
    """
    from runner._stimuli import write_probe_set

    root.mkdir(parents=True)
    stimuli = root / "stimuli"
    write_probe_set(stimuli, 20260421)
    (stimuli / "truth.csv").unlink()  # the glyph table; this study scores one answer each
    rows = [
        f"{png.stem},{'no' if png.stem.startswith('snellen') else 'yes'}\n"
        for png in sorted(stimuli.glob("*.png"))
    ]
    (stimuli / "answers.csv").write_text("stimulus,answer\n" + "".join(rows), encoding="utf-8")
    template = REPO / "runner" / "templates"
    prompts = root / "prompts"
    prompts.mkdir()
    (prompts / "question.txt").write_text(YES_NO_MAYBE_QUESTION, encoding="utf-8")
    for name, source in (("rule", "decoding_rule"), ("note", "matched_control")):
        text = (template / "prompt_tumbling_e" / "prompts" / f"{source}.txt").read_text("utf-8")
        (prompts / f"{name}.txt").write_text(text, encoding="utf-8")
    (root / "study.toml").write_text(YES_NO_MAYBE_SPEC, encoding="utf-8")
    return root
