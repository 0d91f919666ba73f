"""The command-line reference, ``docs/cli.md``, generated from the argument parser that
:mod:`hwgen.cli` builds, so the page lists exactly the commands and options there are::

    python -m hwgen.clidoc > docs/cli.md

``tests/api/test_docs.py`` fails when the committed page differs from :func:`markdown`. The
usage lines are composed here, not by :mod:`argparse`, so the page does not depend on the
terminal's width or on the Python version's help layout."""
from __future__ import annotations

import argparse
import sys

from hwgen import cli

#: the command that regenerates the page (named in the page and in the test's message)
REGENERATE = "python -m hwgen.clidoc > docs/cli.md"


def _subcommands(p: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, one-line help, parser) of each subcommand of ``p``, in the parser's order."""
    out = []
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            helps = {c.dest: c.help or "" for c in a._choices_actions}
            for name, sp in a.choices.items():
                out.append((name, helps.get(name, ""), sp))
    return out


def _shown(p: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in p._actions
            if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))
            and a.help != argparse.SUPPRESS]


def _metavar(a: argparse.Action) -> str:
    if a.metavar is not None:
        return a.metavar if isinstance(a.metavar, str) else " ".join(a.metavar)
    if a.choices is not None:
        return "{" + ",".join(map(str, a.choices)) + "}"
    return a.dest.upper()


def _takes_value(a: argparse.Action) -> bool:
    return a.nargs != 0


def _one(a: argparse.Action) -> str:
    """The argument as the usage line shows it: ``MODEL``, ``-o DIR``, ``--force``."""
    if not a.option_strings:
        mv = _metavar(a)
        return {"?": f"[{mv}]", "*": f"[{mv} ...]", "+": f"{mv} [{mv} ...]"}.get(a.nargs, mv)
    flag = min(a.option_strings, key=len)
    return f"{flag} {_metavar(a)}" if _takes_value(a) else flag


def _groups(p: argparse.ArgumentParser) -> dict[int, argparse._MutuallyExclusiveGroup]:
    return {id(a): g for g in p._mutually_exclusive_groups for a in g._group_actions}


def usage(prog: str, p: argparse.ArgumentParser) -> str:
    """One line: positionals and required options as they are, the rest in brackets, the
    choices of a mutually exclusive group joined by ``|``."""
    groups = _groups(p)
    parts, done = [], set()
    acts = _shown(p)
    for a in [a for a in acts if not a.option_strings] + [a for a in acts if a.option_strings]:
        if id(a) in done:
            continue
        g = groups.get(id(a))
        if g is not None:
            members = [m for m in g._group_actions if m.help != argparse.SUPPRESS]
            done.update(id(m) for m in members)
            alt = " | ".join(_one(m) for m in members)
            parts.append(f"({alt})" if g.required else f"[{alt}]")
            continue
        done.add(id(a))
        text = _one(a)
        parts.append(text if (a.required or not a.option_strings) else f"[{text}]")
    if _subcommands(p):
        parts.append("COMMAND")
    return " ".join([prog] + parts)


def _cell(text: str) -> str:
    """One table cell: one line, ``|`` escaped, ``<top>`` shown rather than taken for HTML."""
    return " ".join(text.split()).replace("|", "\\|").replace("<", "&lt;")


def _help(a: argparse.Action, groups: dict) -> str:
    text = a.help or ""
    if "%(" in text:
        text = text % dict(vars(a), prog="hwgen")
    extra = []
    if a.choices is not None and a.metavar is not None:
        extra.append("one of " + ", ".join(f"`{c}`" for c in a.choices))
    if a.required and a.option_strings:
        extra.append("required")
    if (_takes_value(a) and not any(a.default is v for v in (None, False, argparse.SUPPRESS))
            and "default" not in text):
        extra.append(f"default {a.default}")
    g = groups.get(id(a))
    if g is not None:
        others = [min(m.option_strings, key=len) for m in g._group_actions if m is not a]
        extra.append("not with " + ", ".join(f"`{o}`" for o in others))
    return _cell(text + (f" ({'; '.join(extra)})" if extra else ""))


def _command(prog: str, summary: str, p: argparse.ArgumentParser, level: int) -> list[str]:
    groups = _groups(p)
    lines = [f"{'#' * level} `{prog}`", ""]
    if summary:
        lines += [_cell(summary[:1].upper() + summary[1:]) + ".", ""]
    lines += ["```", usage(prog, p), "```", ""]
    acts = _shown(p)
    if acts:
        lines += ["| argument | meaning |", "|---|---|"]
        for a in acts:
            if a.option_strings:
                names = ", ".join(f"`{o} {_metavar(a)}`" if _takes_value(a) else f"`{o}`"
                                  for o in a.option_strings)
            else:
                names = f"`{_metavar(a)}`"
            lines.append(f"| {names} | {_help(a, groups)} |")
        lines.append("")
    for name, sub_help, sp in _subcommands(p):
        lines += _command(f"{prog} {name}", sub_help, sp, level + 1)
    return lines


def markdown() -> str:
    """The whole page, ending in one newline."""
    ap = cli._parser()
    lines = [
        "# Command-line reference",
        "",
        f"<!-- generated by `{REGENERATE}`: do not edit by hand -->",
        "",
        "Every command and option of `hwgen`, as `hwgen COMMAND --help` prints them. What the",
        "commands do, step by step, is in [commands.md](commands.md); the files they write are",
        "in [formats.md](formats.md).",
        "",
        "```",
        usage("hwgen", ap),
        "```",
        "",
        "| command | what it does |",
        "|---|---|",
    ]
    subs = _subcommands(ap)
    lines += [f"| [`{n}`](#hwgen-{n}) | {_cell(h)} |" for n, h, _ in subs]
    lines.append("")
    for name, h, sp in subs:
        lines += _command(f"hwgen {name}", h, sp, 2)
    return "\n".join(lines).rstrip("\n") + "\n"


def main() -> None:
    sys.stdout.write(markdown())


if __name__ == "__main__":
    main()
