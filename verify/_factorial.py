"""Factors and factorial designs, re-derived from the docs alone (imports no ``runner``).

The pages: ``docs/study-spec.md`` "Factors", ``docs/prompts.md`` §3, ``docs/analysis.md``
"Factorial designs".

* :class:`Factors` reads ``protocol.locked`` ``factors`` and ``factorial``: each cell arm's
  item edits (applied to an item's canonical object by :meth:`Factors.apply`) and template;
* :func:`expansion_problems` re-expands ``[factors]`` and ``[factorial]`` of the locked
  ``study.toml`` (texts from the locked files) and names every level record and cell arm of
  ``protocol.locked`` that is not what the spec gives;
* :func:`factorial_values` fits the factorial GEE with this module's own solver (the
  estimating equations solved by Gauss-Newton with the moment estimator of the exchangeable
  correlation, as ``verify/_mcq.py`` does for seed 002's GEE) and the joint Wald test.
"""

from __future__ import annotations

import itertools
import math
import posixpath
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

# scipy is imported inside the functions that use it: the checks before the science ones load
# none of it (tests/verify/test_verify_imports.py).
import numpy as np

from verify._restats import NotApplicable

__all__ = [
    "OUTCOMES",
    "FactorialError",
    "Factors",
    "design_columns",
    "expansion_problems",
    "factorial_values",
    "interactions",
]

OUTCOMES: Final[dict[str, tuple[str, str]]] = {
    "trial_accuracy": ("accuracy", "binomial"),
    # seed 001's differential-diagnosis metrics (a ddx study; docs/scoring.md §12)
    "plausibility": ("plausibility", "gaussian"),
    "h_coverage": ("h_coverage", "gaussian"),
    "s_coverage": ("s_coverage", "gaussian"),
    "breadth": ("breadth", "gaussian"),
    "grounding_rate": ("grounding_rate", "gaussian"),
    "indirect_rate": ("indirect_rate", "gaussian"),
    "uncertainty": ("uncertainty", "binomial"),
}
"""``outcome`` -> (the dataset's trial column, the GEE family): analysis.md's table."""
_GENERATOR: Final = re.compile(
    r"^\s*([A-Za-z0-9_-]+)\s*=\s*(-?)\s*([A-Za-z0-9_-]+(?:\s*\*\s*[A-Za-z0-9_-]+)+)\s*$"
)


class FactorialError(ValueError):
    """A factor record that cannot be read or applied, or a model that cannot be fitted."""


class FactorialNotApplicable(FactorialError, NotApplicable):
    """analysis.md "Factorial designs": a GEE the data cannot fit (not applicable)."""


def _check_edit(where: str, kind: str, edit: Any) -> None:
    """A level's ``insert`` or ``replace`` edit, if any, has the members of its kind."""
    if edit is None:
        return
    ok = type(edit) is dict and type(edit.get("field")) is str and type(edit.get("text")) is str
    if kind == "insert":
        ok = ok and edit.get("at") in ("start", "end") and type(edit.get("separator")) is str
    if not ok:
        raise FactorialError(
            f"{where}.{kind}: {edit!r} is not "
            "{field, text" + (", at, separator}" if kind == "insert" else "}")
        )


class Factors:
    """``protocol.locked`` ``factors`` and ``factorial``, as the requests use them."""

    def __init__(self, protocol: Mapping[str, Any]) -> None:
        """Read the records; :class:`FactorialError` names the first malformed member."""
        raw = protocol.get("factors")
        fx = protocol.get("factorial")
        if type(raw) is not dict or type(fx) is not dict:
            raise FactorialError("protocol.locked factors/factorial: not objects")
        self.levels: dict[str, dict[str, dict[str, Any]]] = {}
        self.order: dict[str, list[str]] = {}
        self.scope: dict[str, str] = {}
        for name, table in raw.items():
            self._read_factor(name, table)
        names = fx.get("factors")
        if type(names) is not list or any(n not in self.levels for n in names):
            raise FactorialError(f"protocol.locked factorial.factors: {names!r} are not factors")
        self.crossed: list[str] = list(names)

    def _read_factor(self, name: str, table: Any) -> None:
        """One factor's scope and levels, in order; the first (reference) makes no edit."""
        where = f"protocol.locked factors.{name}"
        if type(table) is not dict or table.get("scope") not in ("item", "prompt"):
            raise FactorialError(f"{where}: not an object with scope item or prompt")
        levels = table.get("levels")
        if type(levels) is not list or len(levels) < 2:
            raise FactorialError(f"{where}.levels: not a list of two or more levels")
        self.scope[name] = table["scope"]
        self.levels[name] = {}
        self.order[name] = []
        for i, lv in enumerate(levels):
            if type(lv) is not dict or type(lv.get("name")) is not str:
                raise FactorialError(f"{where}.levels[{i}]: not an object with a name")
            self.levels[name][lv["name"]] = lv
            self.order[name].append(lv["name"])
            for kind in ("insert", "replace"):
                _check_edit(f"{where}.levels[{i}]", kind, lv.get(kind))
            if "remove" in lv and type(lv["remove"]) is not str:
                raise FactorialError(f"{where}.levels[{i}].remove: not a field name")
        if any(k != "name" for k in levels[0]):
            raise FactorialError(f"{where}.levels[0]: the reference level makes an edit")

    def cell_levels(self, cell: Mapping[str, str]) -> list[tuple[str, str, dict[str, Any]]]:
        """(factor, level, level record) of each factor of a cell, in ``[factorial]`` order."""
        out = []
        for f in self.crossed:
            lv = cell.get(f)
            if lv not in self.levels[f]:
                raise FactorialError(f"factor {f!r}: {lv!r} is not one of its levels")
            out.append((f, str(lv), self.levels[f][str(lv)]))
        return out

    def apply(self, fields: Mapping[str, Any], cell: Mapping[str, str]) -> dict[str, Any]:
        """The item with the cell's edits applied (per level: remove, replace, insert)."""
        out = dict(fields)
        for f, lv, record in self.cell_levels(cell):
            for kind in ("remove", "replace", "insert"):
                if kind not in record:
                    continue
                edit = record[kind]
                field = edit if kind == "remove" else edit["field"]
                value = out.get(field)
                if type(value) is not str or field in (
                    "id",
                    "answer",
                    "options",
                    "images",
                    "metadata",
                ):
                    raise FactorialError(
                        f"item {fields.get('id')!r}: factor {f!r} level {lv!r} "
                        f"{kind}s field {field!r}, which the item lacks"
                    )
                if kind == "remove":
                    del out[field]
                elif kind == "replace":
                    out[field] = edit["text"]
                elif edit["at"] == "start":
                    out[field] = edit["text"] + edit["separator"] + value
                else:
                    out[field] = value + edit["separator"] + edit["text"]
        return out

    def template(self, cell: Mapping[str, str]) -> str | None:
        """The path of the cell's item template when a level sets one, else ``None``."""
        for _, _, record in self.cell_levels(cell):
            if type(record.get("template")) is str:
                return str(record["template"])
        return None


# ------------------------------------------------------------------------------ expansion


def _norm(path: str) -> str:
    return posixpath.normpath(path.replace("\\", "/"))


class _LevelProblem(Exception):
    """A factor level's edit the locked files cannot give."""


def _edit(
    edit: dict[str, Any], kind: str, where: str, read: Callable[[str], bytes | None]
) -> dict[str, Any]:
    """One ``replace`` or ``insert`` edit of a level, its text read from a locked file."""
    e: dict[str, Any] = {"field": edit.get("field")}
    if "file" in edit:
        path = _norm(str(edit["file"]))
        data = read(path)
        if data is None:
            raise _LevelProblem(f"{where}.{kind}.file: {path} is not a locked file")
        try:
            e["text"] = data.decode("utf-8").rstrip("\n")
        except UnicodeDecodeError:
            raise _LevelProblem(f"{path}: not UTF-8") from None
        e["file"] = path
    else:
        e["text"] = edit.get("text")
    if kind == "insert":
        e["at"] = edit.get("at")
        e["separator"] = edit.get("separator", " ")
    return e


def _level(
    lname: Any, lv: dict[str, Any], where: str, read: Callable[[str], bytes | None]
) -> tuple[dict[str, Any], list[str]]:
    """One level's record, and the problems of its edits (an edit with a problem is left out)."""
    rec: dict[str, Any] = {"name": lname}
    problems: list[str] = []
    if "remove" in lv:
        rec["remove"] = lv["remove"]
    for kind in ("replace", "insert"):
        edit = lv.get(kind)
        if type(edit) is not dict:
            continue
        try:
            rec[kind] = _edit(edit, kind, where, read)
        except _LevelProblem as exc:
            problems.append(str(exc))
    if "template" in lv:
        rec["template"] = _norm(str(lv["template"]))
    for key in ("components", "system"):
        if key in lv:
            rec[key] = lv[key]
    return rec, problems


def _spec_factors(
    spec: Mapping[str, Any], read: Callable[[str], bytes | None]
) -> tuple[dict[str, Any], list[str]]:
    """The ``factors`` record the locked ``study.toml`` and files give (study-spec.md)."""
    out: dict[str, Any] = {}
    problems: list[str] = []
    raw = spec.get("factors")
    if type(raw) is not dict:
        return out, ["the locked study.toml has no [factors.<NAME>] tables"]
    for name, table in raw.items():
        if type(table) is not dict or type(table.get("levels")) is not dict:
            problems.append(f"study.toml factors.{name}: no levels table")
            continue
        levels = []
        for lname, lv in table["levels"].items():
            where = f"study.toml factors.{name}.levels.{lname}"
            if type(lv) is not dict:
                problems.append(f"{where}: not a table")
                continue
            rec, level_problems = _level(lname, lv, where, read)
            problems += level_problems
            levels.append(rec)
        out[name] = {"scope": table.get("scope"), "levels": levels}
    return out, problems


def _generators(fx: Mapping[str, Any]) -> dict[str, tuple[bool, list[str]]]:
    """A fractional design's generated factors: target -> (negated, the factors multiplied)."""
    generated: dict[str, tuple[bool, list[str]]] = {}
    fraction = fx.get("fraction")
    if type(fraction) is not dict:
        return generated
    for g in fraction.get("generators") or []:
        m = _GENERATOR.match(str(g))
        if m is None:
            raise FactorialError(f"[factorial] fraction: {g!r} is not a generator")
        generated[m.group(1)] = (m.group(2) == "-", [p.strip() for p in m.group(3).split("*")])
    return generated


def _cells(spec_factors: Mapping[str, Any], fx: Mapping[str, Any]) -> list[dict[str, str]]:
    """The cells of ``[factorial]`` in crossing order (the first factor slowest)."""
    names = [str(n) for n in fx.get("factors") or []]
    generated = _generators(fx)
    level_names = {n: [lv["name"] for lv in spec_factors[n]["levels"]] for n in names}
    free = [n for n in names if n not in generated]
    cells = []
    for combo in itertools.product(*(level_names[n] for n in free)):
        cell = dict(zip(free, combo, strict=True))
        for target, (neg, of) in generated.items():
            sign = -1 if neg else 1
            for o in of:
                sign *= -1 if cell[o] == level_names[o][0] else 1
            cell[target] = level_names[target][0 if sign < 0 else 1]
        cells.append({n: cell[n] for n in names})
    return cells


def expansion_problems(
    protocol: Mapping[str, Any],
    spec: Mapping[str, Any] | None,
    read: Callable[[str], bytes | None],
) -> list[str]:
    """Every ``protocol.locked`` factor record and cell arm that the locked spec does not give.

    Each level's record (its edit, the text of a ``file`` read from the locked file) must be
    what ``study.toml`` declares; the cell arms must be exactly the crossing (or fraction) of
    ``[factorial]``: ``<base>.<level>...`` with ``factors``, the base's components, ``item``
    placed when the study has an item template, then the prompt levels' components, and the
    base's system components followed by the levels' system components.
    """
    if spec is None:
        return ["protocol.locked factors: the locked study.toml cannot be read"]
    fx = spec.get("factorial")
    if type(fx) is not dict:
        return ["protocol.locked factorial: the locked study.toml has no [factorial]"]
    want, problems = _spec_factors(spec, read)
    if problems:
        return problems
    got = protocol.get("factors") or {}
    for name in sorted(set(want) | set(got)):
        if name not in got or name not in want:
            problems.append(
                f"protocol.locked factors.{name}: "
                f"{'not declared in study.toml' if name not in want else 'missing'}"
            )
            continue
        w, g = want[name], got[name]
        if w.get("scope") != g.get("scope"):
            problems.append(
                f"protocol.locked factors.{name}.scope: {g.get('scope')!r}, the "
                f"spec gives {w.get('scope')!r}"
            )
        wl, gl = w["levels"], g.get("levels") or []
        for i in range(max(len(wl), len(gl))):
            a = wl[i] if i < len(wl) else None
            b = gl[i] if i < len(gl) else None
            if a != b:
                label = (a or b or {}).get("name", i)
                problems.append(
                    f"protocol.locked factors.{name} level {label!r}: {b!r}, the "
                    f"locked spec and files give {a!r}"
                )
    if problems:
        return problems
    locked_fx = protocol.get("factorial") or {}
    base = fx.get("base")
    names = [str(n) for n in fx.get("factors") or []]
    try:
        cells = _cells(want, fx)
    except FactorialError as exc:
        return [str(exc)]
    ids = [".".join([str(base), *(c[n] for n in names)]) for c in cells]
    expected_fx: dict[str, Any] = {"base": base, "factors": names, "arms": ids}
    if type(fx.get("fraction")) is dict:
        expected_fx["fraction"] = {"generators": list(fx["fraction"].get("generators") or [])}
    if locked_fx != expected_fx:
        problems.append(
            f"protocol.locked factorial: {locked_fx!r}, the locked spec gives {expected_fx!r}"
        )
    arms = protocol.get("arms") or {}
    spec_arms = spec.get("arms") or {}
    base_table = spec_arms.get(base) if type(spec_arms) is dict else None
    if type(base_table) is not dict:
        return [*problems, f"[factorial] base {base!r} is not an arm of the locked spec"]
    if base in arms:
        problems.append(
            f"protocol.locked arms.{base}: the factorial base arm is locked as an "
            "arm; only its cells run"
        )
    template = (spec.get("prompt") or {}).get("item") is not None
    cell_arms = {a for a, info in arms.items() if type(info) is dict and "factors" in info}
    for extra in sorted(cell_arms - set(ids)):
        problems.append(
            f"protocol.locked arms.{extra}: carries factors but is no cell of [factorial]"
        )
    shared: dict[str, Any] | None = None
    for cid, cell in zip(ids, cells, strict=True):
        info = arms.get(cid)
        if type(info) is not dict:
            problems.append(f"protocol.locked arms.{cid}: the cell {cell} is not locked")
            continue
        levels = [next(lv for lv in want[n]["levels"] if lv["name"] == cell[n]) for n in names]
        components = list(base_table.get("components") or [])
        if template and "item" not in components:
            components.append("item")
        components += [c for lv in levels for c in lv.get("components", [])]
        system = list(base_table.get("system") or []) + [
            c for lv in levels for c in lv.get("system", [])
        ]
        expected = {"role": "factorial", "components": components, "factors": cell}
        for key, value in expected.items():
            if info.get(key) != value:
                problems.append(
                    f"protocol.locked arms.{cid}.{key}: {info.get(key)!r}, the "
                    f"expansion of [factorial] gives {value!r}"
                )
        if (info.get("system") or []) != system:
            problems.append(
                f"protocol.locked arms.{cid}.system: {info.get('system')!r}, the "
                f"expansion of [factorial] gives {system or None!r}"
            )
        rest = {
            k: v
            for k, v in info.items()
            if k not in ("role", "components", "factors", "system", "sha256")
        }
        if shared is None:
            shared = rest
        elif rest != shared:
            problems.append(
                f"protocol.locked arms.{cid}: settings {rest!r} differ from the "
                f"other cells' {shared!r} (every cell has the base's)"
            )
    return problems


# ------------------------------------------------------------------------------ the model


def interactions(plan: Mapping[str, Any]) -> list[tuple[str, ...]]:
    """The interactions the factorial hypotheses register, factors in ``[factorial]`` order."""
    order = list((plan.get("factorial") or {}).get("factors") or [])
    out: list[tuple[str, ...]] = []
    for h in plan.get("hypotheses") or []:
        effect = h.get("effect") or []
        if h.get("test") == "factorial" and len(effect) > 1:
            key = tuple(sorted(effect, key=order.index))
            if key not in out:
                out.append(key)
    return out


def design_columns(
    levels: Sequence[tuple[str, Sequence[str]]], inters: Sequence[Sequence[str]]
) -> list[tuple[str, dict[str, str]]]:
    """Main effects (``f[T.level]``), then each interaction's dummy products (analysis.md)."""
    by = dict(levels)
    cols: list[tuple[str, dict[str, str]]] = []
    for f, lv in levels:
        cols += [(f"{f}[T.{x}]", {f: x}) for x in lv[1:]]
    for inter in inters:
        for combo in itertools.product(*(by[f][1:] for f in inter)):
            cols.append(
                (
                    ":".join(f"{f}[T.{x}]" for f, x in zip(inter, combo, strict=True)),
                    dict(zip(inter, combo, strict=True)),
                )
            )
    return cols


def _gee(
    x: np.ndarray[Any, Any],
    y: np.ndarray[Any, Any],
    clusters: list[np.ndarray[Any, Any]],
    family: str,
    tol: float = 1e-10,
    max_iter: int = 200,
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], float, bool, np.ndarray[Any, Any]]:
    """β, robust covariance, α, convergence and model-based covariance of the GEE.

    The exchangeable GEE of the page's equations.

    Binomial: ``µ = 1/(1+e^{-η})``, ``v = µ(1−µ)``, ``dµ/dη = v``; Gaussian: ``µ = η``,
    ``v = 1``, ``dµ/dη = 1``. ``V_i = A_i^½ R(α) A_i^½``; α by the moment estimator with the
    Pearson scale ``Σr²/(n−p)``; robust covariance ``B⁻¹ M B⁻¹``.
    """
    n, p = x.shape
    beta = np.zeros(p)
    alpha = 0.0

    def mean(eta: np.ndarray[Any, Any]) -> tuple[Any, Any, Any]:
        if family == "binomial":
            mu = 1.0 / (1.0 + np.exp(-eta))
            v = mu * (1.0 - mu)
            return mu, v, v
        return eta, np.ones_like(eta), np.ones_like(eta)

    def parts(beta: np.ndarray[Any, Any], alpha: float) -> tuple[Any, Any, Any]:
        bmat = np.zeros((p, p))
        score = np.zeros(p)
        meat = np.zeros((p, p))
        for idx in clusters:
            xi = x[idx]
            mu, v, dmu = mean(xi @ beta)
            d = xi * dmu[:, None]
            sd = np.sqrt(v)
            m = len(idx)
            r = (1.0 - alpha) * np.eye(m) + alpha * np.ones((m, m))
            vmat = sd[:, None] * r * sd[None, :]
            u = d.T @ np.linalg.solve(vmat, y[idx] - mu)
            bmat += d.T @ np.linalg.solve(vmat, d)
            score += u
            meat += np.outer(u, u)
        return bmat, score, meat

    def moment(beta: np.ndarray[Any, Any]) -> float:
        ssr_total, cross, pairs = 0.0, 0.0, 0.0
        for idx in clusters:
            mu, v, _ = mean(x[idx] @ beta)
            res = (y[idx] - mu) / np.sqrt(v)
            ssr = float(res @ res)
            ssr_total += ssr
            cross += (float(res.sum()) ** 2 - ssr) / 2.0
            pairs += len(idx) * (len(idx) - 1) / 2.0
        return float((cross / (ssr_total / (n - p))) / (pairs - p))

    converged = False
    for _ in range(max_iter):
        for _ in range(100):
            bmat, score, _ = parts(beta, alpha)
            step = np.linalg.solve(bmat, score)
            beta = beta + step
            if float(np.max(np.abs(step))) < tol:
                break
        new = moment(beta)
        if abs(new - alpha) < tol:
            alpha, converged = new, True
            break
        alpha = new
    bmat, _, meat = parts(beta, alpha)
    binv = np.linalg.inv(bmat)
    phi = 1.0  # the model-based covariance B⁻¹·φ: φ = 1 for Binomial, Σr²/(n−p) for Gaussian
    if family != "binomial":
        res = y - x @ beta
        phi = float(res @ res) / (n - p)
    return beta, binv @ meat @ binv, alpha, converged, binv * phi


def factorial_values(
    trials: Sequence[Mapping[str, Any]],
    plan: Mapping[str, Any],
    h: Mapping[str, Any],
    models: Sequence[str] = (),
) -> dict[str, Any]:
    """analysis.md "Factorial designs": the GEE and the Wald test of ``h``'s term.

    ``trials`` are the analysable trials (rows with ``arm``, ``model``, ``stimulus`` and the
    outcome's column); only the cell arms' enter.
    """
    import scipy.stats as sps

    outcome = str(h.get("outcome") or "trial_accuracy")
    if outcome not in OUTCOMES:
        raise FactorialError(f"outcome {outcome!r} has no factorial model")
    column, family = OUTCOMES[outcome]
    order = [str(f) for f in (plan.get("factorial") or {}).get("factors") or []]
    factors = plan.get("factors") or {}
    levels = [(f, [str(lv["name"]) for lv in factors[f]["levels"]]) for f in order]
    inters = interactions(plan)
    cols = design_columns(levels, inters)
    cells = {
        a: info["factors"]
        for a, info in (plan.get("arms") or {}).items()
        if type(info) is dict and type(info.get("factors")) is dict
    }
    rows = [
        t
        for t in trials
        if t["arm"] in cells
        and t.get(column) is not None
        and not (isinstance(t[column], float) and math.isnan(t[column]))
    ]
    if not rows:
        raise FactorialError("no analysable trial of a factorial cell")
    y = np.array([float(t[column]) for t in rows])
    arm_cells = [cells[t["arm"]] for t in rows]
    names = ["Intercept"]
    xs = [[1.0] * len(rows)]
    for name, at in cols:
        names.append(name)
        xs.append([1.0 if all(c[f] == v for f, v in at.items()) else 0.0 for c in arm_cells])
    present = [m for m in models if any(str(t["model"]) == m for t in rows)]
    if len(present) >= 2:
        for m in present[1:]:
            names.append(f"model[T.{m}]")
            xs.append([1.0 if str(t["model"]) == m else 0.0 for t in rows])
    x = np.array(xs, dtype=np.float64).T
    if np.linalg.matrix_rank(x) < x.shape[1]:
        raise FactorialError("factorial design: linearly dependent columns")
    if family == "binomial":
        if y.min() == y.max():
            raise FactorialNotApplicable("every trial has the same outcome")
        for group in [(f,) for f in order] + inters:
            seen: dict[tuple[str, ...], set[float]] = {}
            for c, v in zip(arm_cells, y, strict=True):
                seen.setdefault(tuple(c[f] for f in group), set()).add(float(v))
            if any(len(s) == 1 for s in seen.values()):
                raise FactorialNotApplicable("separation: a level or cell has one outcome")
        if len(present) >= 2:
            for m in present:
                if (
                    len({float(v) for t, v in zip(rows, y, strict=True) if str(t["model"]) == m})
                    == 1
                ):
                    raise FactorialNotApplicable(f"separation: model {m} has one outcome")
    stimuli = sorted({str(t["stimulus"]) for t in rows})
    index = {s: i for i, s in enumerate(stimuli)}
    members: list[list[int]] = [[] for _ in stimuli]
    for j, t in enumerate(rows):
        members[index[str(t["stimulus"])]].append(j)
    beta, cov, alpha, converged, naive = _gee(
        x, y, [np.array(m, dtype=np.int64) for m in members], family
    )
    for k, name in enumerate(names):  # mcq-statistics.md §8: a degenerate term
        r, b0 = float(cov[k, k]), float(naive[k, k])
        if not (math.isfinite(r) and math.isfinite(b0) and b0 > 0 and r > 1e-8 * b0):
            raise FactorialNotApplicable(
                f"{name} is degenerate (robust variance {r:.3g}, model-based {b0:.3g})"
            )
    se = np.sqrt(np.diag(cov))
    effect = tuple(sorted(h.get("effect") or [], key=order.index))
    idx = [j + 1 for j, (_, at) in enumerate(cols) if tuple(at) == effect]
    if not idx:
        raise FactorialError(f"effect {list(effect)} is no term of the model")
    b = beta[idx]
    chi2 = float(b @ np.linalg.solve(cov[np.ix_(idx, idx)], b))
    p = float(sps.chi2.sf(chi2, len(idx)))
    crit = float(sps.norm.ppf(0.975))
    terms = [
        {
            "name": names[j],
            "estimate": float(beta[j]),
            "se": float(se[j]),
            "z": float(beta[j] / se[j]),
            "p": float(2 * sps.norm.sf(abs(beta[j] / se[j]))),
            "lower": float(beta[j] - crit * se[j]),
            "upper": float(beta[j] + crit * se[j]),
        }
        for j in range(len(names))
    ]
    one = len(idx) == 1
    return {
        "effect": list(effect),
        "outcome": outcome,
        "gee_family": family,
        "tested": [names[j] for j in idx],
        "chi2": chi2,
        "df": len(idx),
        "p": p,
        "p_raw": p,
        "estimate": float(b[0]) if one else None,
        "odds_ratio": math.exp(float(b[0])) if one and family == "binomial" else None,
        "terms": terms,
        "references": {f: lv[0] for f, lv in levels},
        "interactions": [list(i) for i in inters],
        "n_obs": len(rows),
        "n_clusters": len(stimuli),
        "dependence": alpha,
        "converged": converged,
        "warnings": [],
    }
