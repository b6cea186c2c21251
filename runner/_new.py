"""``ledger new``: scaffold a study folder from a template and create its ledger."""

from __future__ import annotations

import json
import re
import shutil
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from ledger import (
    Ledger,
    LedgerError,
    PostgresLocation,
    RemoteLocation,
    SigningKey,
    check_origin,
    is_http_url,
    is_url,
    schema_for,
)
from runner._lock import LEDGER_FILE, STORE_FILE, StudyError, default_key_path
from runner._stimuli import (
    ANNOTATION_FILE,
    SOURCE_SUFFIXES,
    StimulusError,
    rotate_images,
    write_probe_set,
    write_rotation_set,
)
from runner.spec import ID_RE, load_study

TEMPLATES = {
    "prompt-tumbling-e": "prompt_tumbling_e",
    "prompt-rotation": "prompt_rotation",
    "medmcqa-prompt-sensitivity": "medmcqa_prompt_sensitivity",
    "green-shielding": "green_shielding",
    "green-shielding-pilot": "green_shielding_pilot",
}
SUITES: dict[str, tuple[str, ...]] = {
    "medmcqa-prompt-sensitivity": ("mcq", "cloze", "evidence", "question-only"),
}
"""Templates made of several studies (a study has one parser and one item template): each part
is scaffolded by :func:`new_template` into ``DIRECTORY/<part>`` from the template's
``studies/<part>.toml``, with its own id ``<id>-<part>``, origin and ledger."""
STIMULUS_SEED = 20260421
ROTATION_SEED = 20260425
"""Seed of the synthetic crops of ``prompt-rotation`` (the paper's Experiment 2 seed)."""


def _tumbling_e_stimuli(root: Path, images: Path | None) -> None:
    write_probe_set(root / "stimuli", STIMULUS_SEED)


def _rotation_stimuli(root: Path, images: Path | None) -> None:
    """The synthetic crops, or the user's annotated images (``--images``), and their rotations."""
    if images is None:
        write_rotation_set(root, ROTATION_SEED)
        return
    if not images.is_dir():
        raise StudyError(f"--images {images}: not a directory")
    if not (images / ANNOTATION_FILE).is_file():
        raise StudyError(
            f"--images {images}: no {ANNOTATION_FILE}; annotate each image's base orientation "
            "(header source,orientation; one row per image stem, UP, RIGHT, DOWN or LEFT)"
        )
    sources = root / "sources"
    sources.mkdir()
    for path in sorted(images.iterdir()):
        if path.is_file() and (
            path.suffix.lower() in SOURCE_SUFFIXES or path.name == ANNOTATION_FILE
        ):
            shutil.copyfile(path, sources / path.name)
    try:
        rotate_images(sources, root / "stimuli")
    except StimulusError as exc:  # name the user's folder, not the copy
        raise StudyError(str(exc).replace(str(sources), str(images))) from None


def _green_items(root: Path, images: Path | None) -> None:
    """Import the 30 synthetic cases, as a user imports HealthCareMagic, with their sidecar.

    ``data/cases-hcm.json`` is in the HealthCareMagic-100k release's format; the importer
    (``ledger items import --format healthcaremagic --id-prefix gs --metadata
    data/cases-metadata.json``) writes ``data/items.jsonl`` with the reference sets and factor
    labels of ``data/cases-metadata.json`` as each item's metadata.
    """
    from runner._importers import DatasetError, import_dataset

    data = root / "data"
    try:
        import_dataset(
            "healthcaremagic",
            data / GREEN_CASES,
            data / "items.jsonl",
            id_prefix="gs",
            metadata=data / GREEN_METADATA,
        )
    except DatasetError as exc:
        raise StudyError("; ".join(exc.problems)) from None


def _pilot_items(root: Path, images: Path | None) -> None:
    """Import the synthetic exam questions, as a user imports MedXpertQA's Text subset.

    ``data/questions-medxpertqa.jsonl`` is in MedXpertQA's release format; the importer
    (``ledger items import --format medxpertqa``) writes ``data/items.jsonl``, of which the study
    uses the first 38 (``[stimuli] range``).
    """
    from runner._importers import DatasetError, import_dataset

    data = root / "data"
    try:
        import_dataset("medxpertqa", data / PILOT_QUESTIONS, data / "items.jsonl")
    except DatasetError as exc:
        raise StudyError("; ".join(exc.problems)) from None


PILOT_QUESTIONS = "questions-medxpertqa.jsonl"
GREEN_CASES = "cases-hcm.json"
GREEN_METADATA = "cases-metadata.json"
STIMULI: dict[str, Callable[[Path, Path | None], None]] = {
    "prompt-tumbling-e": _tumbling_e_stimuli,
    "prompt-rotation": _rotation_stimuli,
    "green-shielding": _green_items,
    "green-shielding-pilot": _pilot_items,
}
"""How each template with stimuli writes them (``images``: the user's own, where it takes them)."""
IMAGE_TEMPLATES = frozenset({"prompt-rotation"})
"""Templates that take ``--images``."""


@dataclass(frozen=True)
class NewStudy:
    """What :func:`new_study` created."""

    root: Path
    ledger: Path | PostgresLocation | RemoteLocation
    key_path: Path | None
    owner: str
    study_id: str = ""
    origin: str = ""


def default_origin(study_id: str) -> str:
    """The checkpoint origin ``ledger new`` gives a study: ``prompt-ledger.local/<id>``."""
    return f"prompt-ledger.local/{study_id}"


def study_id_from_directory(directory: str | Path) -> str:
    """A valid study id made from a directory's name (other characters become ``-``).

    ``my study (v2)`` gives ``my-study-v2``; raises :class:`StudyError` if nothing usable is left.
    """
    name = Path(directory).resolve().name
    candidate = re.sub(r"[^A-Za-z0-9_.-]+", "-", name)
    candidate = re.sub(r"^[^A-Za-z0-9]+", "", candidate)[:64].rstrip("-.")
    if not ID_RE.match(candidate):
        raise StudyError(
            f"cannot make a study id from the directory name {name!r}; give one with --id "
            "(letters, digits, '.', '_' or '-', at most 64)"
        )
    return candidate


def _template_spec(template: str, part: str | None = None) -> dict[str, object]:
    folder = resources.files("runner") / "templates" / TEMPLATES[template]
    source = folder / "studies" / f"{part}.toml" if part else folder / "study.toml"
    study = tomllib.loads(source.read_text(encoding="utf-8")).get("study", {})
    return dict(study) if isinstance(study, dict) else {}


def _set_study_fields(spec: Path, values: dict[str, str]) -> None:
    """Rewrite ``key = "..."`` lines of the ``[study]`` table (added after its header if absent)."""
    text = spec.read_text(encoding="utf-8")
    match = re.search(r"^\[study\][^\n]*\n", text, flags=re.M)
    if match is None:
        raise StudyError(f"{spec}: the template has no [study] table")
    following = re.search(r"^\[", text[match.end() :], flags=re.M)
    end = match.end() + (following.start() if following else len(text) - match.end())
    table = text[match.end() : end]
    for field, value in values.items():
        line = f"{field} = {json.dumps(value)}"
        table, count = re.subn(rf"^{field}\s*=.*$", line, table, count=1, flags=re.M)
        if count == 0:
            table = line + "\n" + table
    spec.write_text(text[: match.end()] + table + text[end:], encoding="utf-8")


def new_study(
    directory: str | Path,
    template: str,
    key: SigningKey | None = None,
    *,
    study_id: str | None = None,
    origin: str | None = None,
    images: str | Path | None = None,
    store: str | None = None,
) -> NewStudy:
    """Write a complete, lockable study into ``directory`` and create its ledger.

    ``store`` (a ``postgresql://`` URL, ``docs/storage.md``) puts the ledger on PostgreSQL, in
    the schema the URL's ``?schema=`` names (default: one named after the study id), and writes
    the URL into ``ledger.store`` instead of creating ``ledger.db``.

    ``study_id`` becomes ``[study] id`` in ``study.toml`` and ``origin`` its ``origin`` (default
    ``prompt-ledger.local/<study_id>``); both default to the template's own when ``study_id`` is
    None (``ledger new`` passes the directory's name instead). The ledger is created with that
    origin, so every checkpoint of the study carries it.

    Without ``key``, an owner key named ``<origin>/owner`` is created in the user's key directory
    (``$PROMPT_LEDGER_HOME/keys/<study id>-owner.key``, never inside the study folder), with its
    ``.vkey`` beside it. If that file exists already, another study was made with the same id:
    this refuses rather than share a key (and an origin) between studies; pass ``key`` to reuse
    a key deliberately.

    ``images`` (``prompt-rotation`` only) is a folder of the user's own PNG/JPEG images with an
    ``orientation.csv`` annotating each one's base orientation: they replace the synthetic
    crops (copied to ``sources/``, rotated into ``stimuli/``).

    A template of several studies (:data:`SUITES`) is refused here: :func:`new_template`
    scaffolds each of them.
    """
    if template in SUITES:
        raise StudyError(
            f"template {template!r} is {len(SUITES[template])} studies "
            f"({', '.join(SUITES[template])}): scaffold them with new_template"
        )
    return _new_study(
        directory, template, key, study_id=study_id, origin=origin, images=images, store=store
    )


def new_template(
    directory: str | Path,
    template: str,
    key: SigningKey | None = None,
    *,
    study_id: str | None = None,
    origin: str | None = None,
    images: str | Path | None = None,
    store: str | None = None,
) -> list[NewStudy]:
    """Scaffold a template into ``directory``: one study, or each study of a :data:`SUITES` one.

    A one-study template is :func:`new_study`. A template of several studies writes each part
    into ``directory/<part>`` with the id ``<study_id>-<part>`` (``study_id`` defaults to the
    template's name), the origin ``<origin>/<part>`` when ``origin`` is given (else
    ``prompt-ledger.local/<id>``) and its own ledger, plus the template's ``README.md`` in
    ``directory``; without ``key`` each part gets its own owner key, as :func:`new_study` makes
    one. Nothing is left behind when any part fails.
    """
    if template not in SUITES:
        return [
            new_study(
                directory,
                template,
                key,
                study_id=study_id,
                origin=origin,
                images=images,
                store=store,
            )
        ]
    root = Path(directory)
    if root.exists() and not root.is_dir():
        raise StudyError(
            f"{root} is a file, where the study directory is expected; choose a new directory"
        )
    if root.exists() and any(root.iterdir()):
        raise StudyError(f"{root} exists and is not empty; choose a new directory")
    base = study_id if study_id is not None else template
    existed = root.exists()
    made: list[NewStudy] = []
    try:
        for part in SUITES[template]:
            made.append(
                _new_study(
                    root / part,
                    template,
                    key,
                    study_id=f"{base}-{part}",
                    origin=f"{origin}/{part}" if origin is not None else None,
                    part=part,
                    store=store,
                )
            )
        readme = resources.files("runner") / "templates" / TEMPLATES[template] / "README.md"
        (root / "README.md").write_text(readme.read_text(encoding="utf-8"), encoding="utf-8")
    except BaseException:
        for study in made:
            if study.key_path is not None:
                study.key_path.unlink(missing_ok=True)
                study.key_path.with_suffix(".vkey").unlink(missing_ok=True)
        _remove_created(root, existed)
        raise
    return made


def _new_study(
    directory: str | Path,
    template: str,
    key: SigningKey | None,
    *,
    study_id: str | None,
    origin: str | None,
    part: str | None = None,
    images: str | Path | None = None,
    store: str | None = None,
) -> NewStudy:
    """:func:`new_study`, or one ``part`` of a template of several studies."""
    root = Path(directory)
    where = _store_location(store, part)
    if template not in TEMPLATES:
        raise StudyError(f"unknown template {template!r}; available: {', '.join(TEMPLATES)}")
    if images is not None and template not in IMAGE_TEMPLATES:
        raise StudyError(
            f"--images: the template {template!r} does not take images; use "
            f"{', '.join(sorted(IMAGE_TEMPLATES))}"
        )
    if root.exists() and not root.is_dir():
        raise StudyError(
            f"{root} is a file, where the study directory is expected; choose a new directory"
        )
    if root.exists() and any(root.iterdir()):
        raise StudyError(f"{root} exists and is not empty; choose a new directory")
    defaults = _template_spec(template, part)
    changes: dict[str, str] = {}
    if study_id is not None:
        if not ID_RE.match(study_id):
            raise StudyError(
                f"study id {study_id!r}: use letters, digits, '.', '_' or '-' (at most 64)"
            )
        if study_id != defaults.get("id"):
            changes["id"] = study_id
    final_id = study_id if study_id is not None else str(defaults.get("id", ""))
    if origin is None and study_id is not None:
        origin = default_origin(study_id)
    if origin is not None:
        try:
            check_origin(origin)
        except LedgerError as exc:
            raise StudyError(f"--origin: {exc}") from exc
        if origin != defaults.get("origin"):
            changes["origin"] = origin
    key_path: Path | None = None
    if key is None:
        key_path = default_key_path(final_id)
        if key_path.exists():
            raise StudyError(
                f"an owner key for study id {final_id!r} already exists at {key_path}: another "
                "study was created with this id, and two studies must not share a key and a "
                f"checkpoint origin. Choose another id (--id), or pass --key {key_path} to "
                "reuse that key deliberately"
            )
    existed = root.exists()
    made_key = False
    try:
        templates = resources.files("runner") / "templates"
        source = templates / TEMPLATES[template]
        with resources.as_file(source) as src:
            if part is None:
                shutil.copytree(src, root, dirs_exist_ok=True)
            else:
                shutil.copytree(
                    src,
                    root,
                    dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("studies", "__pycache__"),
                )
                shutil.copyfile(src / "studies" / f"{part}.toml", root / "study.toml")
        if part is not None:
            stopwords = (templates / "stopwords-en.txt").read_text(encoding="utf-8")
            (root / "data" / "stopwords-en.txt").write_text(stopwords, encoding="utf-8")
        if changes:
            _set_study_fields(root / "study.toml", changes)
        writer = STIMULI.get(template) if part is None else None
        if writer is not None:
            writer(root, None if images is None else Path(images))
        study = load_study(root)
        if key is None:
            assert key_path is not None
            key = SigningKey.generate(f"{study.origin}/owner")
            try:
                key.save(key_path, vkey=True)
            except LedgerError as exc:
                raise StudyError(
                    f"{exc} (new owner keys go to $PROMPT_LEDGER_HOME/keys, else "
                    "~/.prompt-ledger/keys: set PROMPT_LEDGER_HOME to a writable directory, "
                    "or pass --key FILE)"
                ) from exc
            made_key = True
        if where is None:
            located: Path | PostgresLocation | RemoteLocation = root / LEDGER_FILE
        elif isinstance(where, RemoteLocation):  # the service's store keeps it
            located = where
            (root / STORE_FILE).write_text(f"{where}\n", encoding="utf-8")
        else:
            if not where.schema:  # the URL named none: the study's id does
                where = PostgresLocation(where.conninfo, schema_for(study.id))
            located = where
            (root / STORE_FILE).write_text(f"{where}\n", encoding="utf-8")
        with Ledger.create(located, origin=study.origin, key=key):
            pass
    except BaseException:
        # A failed `ledger new` leaves nothing behind, so running it again just works.
        if made_key and key_path is not None:
            key_path.unlink(missing_ok=True)
            key_path.with_suffix(".vkey").unlink(missing_ok=True)
        _remove_created(root, existed)
        raise
    return NewStudy(root, located, key_path, key.actor, study.id, study.origin)


def _store_location(
    store: str | None, part: str | None
) -> PostgresLocation | RemoteLocation | None:
    """The PostgreSQL store ``--store`` names (None: the SQLite default), checked before work.

    A URL without ``?schema=`` comes back with an empty schema: the study's id names it once the
    study is written (:func:`ledger.schema_for`); with one, each part of a template of several
    studies gets ``<schema>_<part>``.
    """
    if store is None:
        return None
    if is_http_url(store):  # a study behind `ledger serve` (docs/service.md §9)
        try:
            remote = RemoteLocation.parse(store)
        except LedgerError as exc:
            raise StudyError(f"--store: {exc}") from exc
        if part is None:
            return remote
        return RemoteLocation(tuple(f"{u}-{part.lower()}" for u in remote.urls))
    if not is_url(store):
        raise StudyError(
            f"--store {store!r}: takes a PostgreSQL URL (postgresql://[user@]host[:port]/"
            "database[?schema=NAME]); a study's SQLite ledger (STUDY/ledger.db) is the default, "
            "so leave --store out for it"
        )
    try:
        where = PostgresLocation.parse(store, default_schema="pending")
    except LedgerError as exc:
        raise StudyError(f"--store: {exc}") from exc
    explicit = "schema" in {k for k, _ in parse_qsl(urlsplit(store).query)}
    if not explicit:
        return PostgresLocation(where.conninfo, "")
    if part is not None:
        return PostgresLocation(where.conninfo, schema_for(f"{where.schema}_{part}"))
    return where


def _remove_created(root: Path, existed: bool) -> None:
    """Remove what :func:`new_study` wrote: ``root`` itself, or only its contents if it existed.

    ``root`` was empty when :func:`new_study` started (it refuses otherwise), so everything in
    it is the study's.
    """
    if not existed:
        shutil.rmtree(root, ignore_errors=True)
        return
    for child in list(root.iterdir()) if root.is_dir() else []:
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)
