"""How much of the corpus of real users' augmentations (``tests/realops``) the tracer lowers,
how much of the held-out set (``tests/realops_holdout``: ops nobody tuned the tracer for) and
how much of the blind set (``tests/realops_blind``: ops of other libraries, chosen without
looking at what the tracer lowers).

Prints, for each set, one row per op (name, library, lowered or refused, the refusal's reason in
a few words), the share lowered per library and overall, and the refusals grouped by construct:
the work list for making more of them lower. The held-out and blind sets' shares say whether
the corpus's holds on new code. Traces only (no pipeline runs); ``tests/test_realops.py``
checks the lowered ops' pixels.

    python benchmarks/realops_report.py                  # every set, one section each
    python benchmarks/realops_report.py --set holdout    # the held-out set only
    python benchmarks/realops_report.py --set blind      # the blind set only
    python benchmarks/realops_report.py --reasons        # and each refusal's full message
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Constructs, tried in order on a refusal's message (reason and source line): the first match
# names the group. Ordered from the specific to the generic.
GROUPS: list[tuple[str, str]] = [
    ("histogram / cumulative sum",
     r"np\.(histogram|cumsum|bincount)|calcHist|equalizeHist|per-tile histograms"),
    ("cv2 call with no exact DALI form",
     r"^cv2\.\w+(\(\.\.\.\)\.\w+)? (\(|with|is outside|between)"),
    ("PIL call with no exact DALI form", r"^PIL "),
    ("library outside numpy (torch, ...)", r"is outside numpy"),
    ("ndarray method of a constant given a per-sample value", r"the method ndarray\."),
    ("ndarray method not lowered", r"^ndarray\.\w+"),
    ("** by a per-sample exponent", r"\*\*\) with a per-sample exponent|^\*\* with"),
    ("read of a global dict or a list default", r"a read of the (global|default value)"),
    ("numpy function in a library helper (albucore sz_lut)", r"np\.require"),
    ("a new array of a per-sample shape",
     r"needs a concrete int|np\.(zeros|ones|empty|full) of a per-sample shape"),
    ("int() / float() of a per-sample value", r"^(int|float)\(\) of a per-sample value"),
    ("numpy call that wants a concrete array",
     r"^np\.(asarray|float32|rollaxis)\b|conversion to a concrete numpy array"),
    ("an exception met while tracing (ValueError, TypeError)", r"^(ValueError|TypeError): "),
    ("float sum over an array laid out in memory as the tracer does not follow",
     r"of floating-point values over an array whose memory layout"),
    ("random array of a per-sample size (noise)", r"^rng\.\w+\(size=<a per-sample value>\)"),
    ("control flow on pixel values", r"^Python control flow \(if/while/and/or\) on pixel"),
]


def group_of(message: str) -> str:
    """The construct a refusal falls under (its own first words where no group matches)."""
    for name, pattern in GROUPS:
        if re.search(pattern, message, flags=re.MULTILINE):
            return name
    return "other: " + message.split(" at ")[0][:60]


def few_words(reason: str, limit: int = 58) -> str:
    """The refusal's reason on one line, cut to ``limit`` characters."""
    one = " ".join(reason.split())
    return one if len(one) <= limit else one[: limit - 3] + "..."


def _short(text: str) -> str:
    """``text`` on one line, with paths inside the repository relative to its root."""
    return " ".join(text.replace(str(ROOT) + "/", "").split())


def _commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "tests/realops",
                                "tests/realops_holdout", "tests/realops_blind",
                                "augment_ops"], cwd=ROOT,
                               capture_output=True, text=True,
                               check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" (with uncommitted changes to the tracer or the ops)" if dirty else "")


# Each set: its title and the package under tests/ that holds it.
SETS: dict[str, tuple[str, str]] = {
    "corpus": ("the corpus", "realops"),
    "holdout": ("the held-out set", "realops_holdout"),
    "blind": ("the blind set", "realops_blind"),
}


def ops_of(which: str) -> list:
    """The ops (``realops.RealOp``) of the set ``which`` ("corpus", "holdout" or "blind")."""
    sys.path.insert(0, str(ROOT / "tests"))
    sys.path.insert(0, str(ROOT))
    if which == "corpus":
        from realops import corpus
        return corpus()
    if which == "holdout":
        from realops_holdout import holdout
        return holdout()
    if which == "blind":
        from realops_blind import blind
        return blind()
    raise ValueError(f"unknown set {which!r}: expected one of {sorted(SETS)}")


def rows(which: str = "corpus") -> list[dict[str, str]]:
    """One dict per op of the set ``which``: name, library, result, reason, group, source."""
    entries = ops_of(which)
    from augment_ops.trace import TraceError, trace_op

    out = []
    for entry in entries:
        try:
            trace_op(entry.op)
        except TraceError as e:
            out.append({"name": entry.name, "library": entry.library, "result": "refused",
                        "reason": e.construct, "message": str(e), "group": group_of(str(e)),
                        "source": entry.source})
        else:
            out.append({"name": entry.name, "library": entry.library, "result": "lowered",
                        "reason": "", "message": "", "group": "", "source": entry.source})
    return out


def report(table: list[dict[str, str]], reasons: bool = False, which: str = "corpus") -> str:
    import numpy as np
    from nvidia.dali import __version__ as dali_version

    title, package = SETS[which]
    lines = [f"realops, {title}: what augment_ops.trace lowers of {len(table)} augmentations "
             f"copied from public libraries (tests/{package})",
             f"commit {_commit()}; numpy {np.__version__}, DALI {dali_version}", ""]
    width = max(len(r["name"]) for r in table)
    lib_w = max(len(r["library"]) for r in table)
    lines.append(f"{'op':<{width}}  {'library':<{lib_w}}  {'result':<7}  first refusal reason")
    for r in table:
        lines.append(f"{r['name']:<{width}}  {r['library']:<{lib_w}}  {r['result']:<7}  "
                     f"{few_words(r['reason'])}")
    lines.append("")
    by_lib: dict[str, list[dict[str, str]]] = defaultdict(list)
    for r in table:
        by_lib[r["library"]].append(r)
    lines.append("share lowered by library:")
    for lib, rs in sorted(by_lib.items(), key=lambda kv: -len(kv[1])):
        n = sum(r["result"] == "lowered" for r in rs)
        lines.append(f"  {lib:<{lib_w}}  {n:>2} / {len(rs):<2}")
    lowered = sum(r["result"] == "lowered" for r in table)
    lines.append(f"share lowered: {lowered} / {len(table)} = {lowered / len(table):.0%}")
    lines.append("")
    groups: dict[str, list[str]] = defaultdict(list)
    for r in table:
        if r["result"] == "refused":
            groups[r["group"]].append(r["name"])
    lines.append(f"refusals by construct ({len(table) - lowered}):")
    for name, ops in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        lines.append(f"  {len(ops):>2}  {name}: {', '.join(ops)}")
    if reasons:
        lines.append("")
        lines.append("refusal messages:")
        for r in table:
            if r["result"] == "refused":
                lines.append(f"  {r['name']}: {_short(r['message'])}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reasons", action="store_true", help="print each refusal's message")
    parser.add_argument("--set", choices=[*SETS, "all"], default="all", dest="which",
                        help="the corpus, the held-out set, the blind set, or all in one "
                             "section each (default)")
    args = parser.parse_args(argv)
    chosen = list(SETS) if args.which == "all" else [args.which]
    sys.stdout.write("\n".join(report(rows(w), reasons=args.reasons, which=w) for w in chosen))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
