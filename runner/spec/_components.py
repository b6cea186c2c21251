"""``[components]``: the prompt components, each a text file of the study (``docs/prompts.md``)."""

from __future__ import annotations

from pathlib import Path
from typing import Final

from runner.spec._fields import section_table
from runner.spec._state import Loading

RESERVED_COMPONENTS: Final = ("item", "examples")
"""Component names an arm may list without declaring them: the item block and the inline
few-shot block (``docs/prompts.md`` section 3)."""


def parse_components(st: Loading) -> None:
    """Each component a readable UTF-8 file in the study folder, none of a reserved name."""
    c = st.c
    components: dict[str, Path] = {}
    for name, rel in section_table(c, st.data, "components").items():
        if not isinstance(rel, str):
            c.add(f"components.{name}", "must be a file path")
            continue
        components[name] = st.inside(rel, f"components.{name}")
        if components[name].is_file():
            st.read_text(components[name], f"components.{name}")
    for name in components:
        if name in RESERVED_COMPONENTS:
            c.add(
                f"components.{name}",
                f"{name!r} is reserved (an arm lists it for the "
                f"{'item block' if name == 'item' else 'inline few-shot examples'})",
            )
    st.components = components
