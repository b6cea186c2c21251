""":func:`load_study`: ``study.toml`` read, then its sections parsed in order (:data:`SECTIONS`).

Every problem of every section is collected before :class:`SpecError` is raised, so the order
of :data:`SECTIONS` is the order problems are listed in: a section parser may check what the
sections before it read (an arm's variants once ``[variants]`` is read, a judge once
``[steps]`` is).
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from ledger import describe_os_error, describe_utf8_error
from runner._errors import SpecError
from runner._schema import LineFinder, unknown_keys
from runner.spec import (
    _analysis,
    _arms,
    _components,
    _data_arm,
    _delegated,
    _deviations,
    _factorial,
    _hypotheses,
    _models,
    _prompt,
    _response,
    _reviews,
    _stimuli,
    _study_table,
    _variants,
)
from runner.spec._collector import Collector
from runner.spec._design import parse_design
from runner.spec._state import Loading
from runner.spec._study import Study

MAX_SPEC_BYTES: Final = (
    16 << 20
)  # a study.toml is a few kB; 16 MiB leaves room for long inline text

Section = Callable[[Loading], None]
SECTIONS: Final[tuple[Section, ...]] = (
    _study_table.parse_study_table,
    _models.parse_models,
    _prompt.parse_prompt,
    _components.parse_components,
    _arms.parse_arms,
    _factorial.parse_factorial_tables,
    _response.parse_response,
    _stimuli.parse_stimuli,
    parse_design,
    _hypotheses.parse_hypotheses,
    _analysis.parse_analysis,
    _hypotheses.check_main_model,
    _variants.parse_variants,
    _hypotheses.check_design,
    _data_arm.check_data_arms,
    _delegated.parse_records,
    _deviations.parse_deviations,
    _delegated.parse_step_tables,
    _reviews.parse_reviews,
    _hypotheses.check_steps,
    _response.check_judge,
    _delegated.parse_ddx_table,
    _delegated.parse_plan_table,
)
"""The section parsers of :func:`load_study`, in the order they run."""


def _read_spec(root: Path, spec_path: Path) -> tuple[str, dict[str, Any]]:
    """The text of ``study.toml`` and its TOML (:class:`SpecError` when either cannot be had)."""
    if spec_path.is_dir():
        raise SpecError([f"{spec_path} is a directory, where the study spec file is expected"])
    try:
        if spec_path.stat().st_size > MAX_SPEC_BYTES:  # refused before a byte is read
            raise SpecError(
                [
                    f"{spec_path}: {spec_path.stat().st_size:,} bytes, more than the "
                    f"{MAX_SPEC_BYTES:,} a study spec may have"
                ]
            )
        raw = spec_path.read_bytes()
    except FileNotFoundError:
        raise SpecError([f"{spec_path}: no study spec (study.toml) in {root}"]) from None
    except OSError as exc:
        raise SpecError([f"cannot read {describe_os_error(exc, spec_path)}"]) from None
    try:
        text = raw.decode("utf-8")
        return text, tomllib.loads(text)
    except UnicodeDecodeError as exc:
        raise SpecError([f"{spec_path}: {describe_utf8_error(raw, exc)}"]) from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError([f"{spec_path}: not valid TOML: {exc}"]) from None
    except RecursionError:  # tomllib recurses per nesting level
        raise SpecError(
            [
                f"{spec_path}: arrays or tables nested too deep to read (a study spec "
                "nests a few levels)"
            ]
        ) from None


def _unknown_problems(c: Collector, data: dict[str, Any]) -> None:
    """One problem per unknown key, in file order (before every other problem)."""
    found: list[tuple[int, str]] = []
    for unknown in unknown_keys(data):
        line = c.lines.line(unknown.path) if c.lines is not None else None
        where = f"{c.file}:{line}" if line else c.file
        if unknown.table:
            message = f"{where}: {unknown.table} {unknown.key}: unknown key ({unknown.hint})"
        else:
            what = "unknown section" if unknown.section else "unknown top-level key"
            message = f"{where}: {unknown.key}: {what} ({unknown.hint})"
        found.append((line or 0, message))
    c.problems.extend(message for _, message in sorted(found, key=lambda f: f[0]))


def load_study(root: str | Path, *, strict: bool = True) -> Study:
    """Read and validate ``ROOT/study.toml``. Raises :class:`SpecError` listing every problem.

    Every key must be one the spec knows (``docs/study-spec.md``); each problem names the file,
    the line (when the key is written) and the field. ``strict=False`` leaves unknown keys
    unreported: for a study already locked, whose spec can no longer change (``ledger new``,
    ``arms`` and ``lock`` are strict, so a study locked now has none).
    """
    root = Path(root)
    spec_path = root / "study.toml"
    text, data = _read_spec(root, spec_path)
    st = Loading(Collector(str(spec_path), LineFinder(text)), root, spec_path, data)
    if strict:
        _unknown_problems(st.c, data)
    for section in SECTIONS:
        section(st)
    if st.c.problems:
        raise SpecError(st.c.problems)
    loaded = _study(st)
    if st.items is not None:  # read once, here: Study.load_items returns it from now on
        object.__setattr__(loaded, "_items", st.items)
    return loaded


def _study(st: Loading) -> Study:
    """The :class:`Study` of a spec read without a problem."""
    return Study(
        root=st.root,
        spec_path=st.spec_path,
        id=st.study_id,
        title=st.title,
        origin=st.origin,
        model=st.model,
        components=st.components,
        arms=st.arms,
        stimuli_dir=st.stimuli_dir,
        truth_path=st.truth_path,
        stimuli=st.stimuli,
        replicates=st.replicates,
        seed=st.seed,
        bootstrap_seed=st.bootstrap_seed,
        bootstrap_iterations=st.bootstrap_iterations,
        blinding_secret=st.blinding_secret,
        response_format=st.response_format,
        parser=st.parser,
        hypotheses=tuple(st.hypotheses),
        analysis=st.analysis,
        amendable=st.amendable,
        deviations=st.deviations,
        answer_column=st.answer_column,
        letters=st.letters,
        mode=st.mode,
        items_path=st.items_path,
        item_first=st.items.first if st.items is not None else None,
        prompt=st.prompt,
        fewshot=st.fewshot,
        models=st.models,
        phase=st.phase,
        variants=tuple(st.variants),
        witnessing=st.witnessing,
        timestamping=st.timestamping,
        steps=st.steps,
        reviews=st.reviews,
        privacy=st.privacy,
        factors=st.factors,
        factorial=st.factorial,
        ddx=st.ddx,
        plan=st.plan,
    )
