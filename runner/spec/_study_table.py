"""``[study]``: the study's id, title, origin, phase and amendable documents."""

from __future__ import annotations

from runner.spec._fields import ID_RE, section_table, string
from runner.spec._state import Loading


def parse_study_table(st: Loading) -> None:
    """``id`` (a name), ``title``, ``origin`` (default ``prompt-ledger.local/<id>``), ..."""
    c = st.c
    study = section_table(c, st.data, "study")
    st.study_id = string(c, study, "id", "study")
    if st.study_id and not ID_RE.match(st.study_id):
        c.add("study.id", "use letters, digits, '.', '_' or '-' (at most 64)")
    st.title = string(c, study, "title", "study")
    st.origin = string(c, study, "origin", "study", f"prompt-ledger.local/{st.study_id}")
    amendable = study.get("amendable", [])
    if not isinstance(amendable, list) or not all(isinstance(x, str) for x in amendable):
        c.add("study.amendable", "must be a list of study-relative file paths")
        amendable = []
    st.amendable = tuple(amendable)
    phase = study.get("phase")
    if phase is not None and not (isinstance(phase, str) and ID_RE.match(phase)):
        c.add("study.phase", "must be a name: letters, digits, '.', '_' or '-' (at most 64)")
        phase = None
    st.phase = phase
