#!/usr/bin/env python3
"""Checks the relative links of the book (docs/src) and of the top-level Markdown files.

mdBook builds a page with a broken link without a word, so scripts/docs.sh runs this after it.
Fails (exit 1, one line per problem) on:
- a relative link to a file or folder that does not exist;
- a `#anchor` that no heading of the target page (or of the page itself) produces;
- a link from a book page to a file outside docs/src (the built book does not have it);
- a page of docs/src that SUMMARY.md does not list (mdBook would not build it);
- an `{{#include PATH}}` whose file does not exist.
Anchors are made from headings the way mdBook and GitHub make them: lower case, spaces to `-`,
every character other than letters, digits, `-` and `_` dropped, `-1`, `-2`... for repeats.
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "docs" / "src"
TOP_LEVEL = ["README.md", "ARCHITECTURE.md", "CONTRIBUTING.md", "CHANGELOG.md"]

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
CODE_SPAN = re.compile(r"`+[^`]*`+")
# [text](target) or [text](target "title"); the text may hold one level of brackets.
LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INCLUDE = re.compile(r"\{\{#include\s+([^}\s:]+)(?::[^}]*)?\s*\}\}")


def prose_lines(text):
    """The lines outside fenced code blocks, with their numbers."""
    fenced = False
    for number, line in enumerate(text.split("\n"), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def slug(heading):
    text = re.sub(r"<[^>]+>", "", heading)  # inline HTML
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links keep their text
    text = text.replace("`", "").strip().lower()
    return "".join(
        "-" if c == " " else c for c in text if c.isalnum() or c in "-_ "
    )


def anchors(path, cache={}):
    if path not in cache:
        found, seen = set(), {}
        for _, line in prose_lines(path.read_text(encoding="utf-8")):
            match = HEADING.match(line)
            if not match:
                continue
            base = slug(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
        cache[path] = found
    return cache[path]


def check(page, problems):
    text = page.read_text(encoding="utf-8")
    in_book = BOOK in page.parents
    for number, line in prose_lines(text):
        where = f"{page.relative_to(ROOT)}:{number}"
        for match in INCLUDE.finditer(line):
            if not (page.parent / match.group(1)).exists():
                problems.append(f"{where}: {{{{#include}}}} of a missing file: {match.group(1)}")
        for match in LINK.finditer(CODE_SPAN.sub("", line)):
            target = match.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
                continue  # https:, mailto: ...
            path_part, _, anchor = target.partition("#")
            resolved = (page.parent / path_part).resolve() if path_part else page
            if path_part and not resolved.exists():
                problems.append(f"{where}: link to a missing file: {target}")
                continue
            if in_book and BOOK not in resolved.parents and resolved != BOOK:
                problems.append(
                    f"{where}: a book page links outside docs/src, which the built book lacks: {target}"
                )
                continue
            if anchor:
                if resolved.suffix != ".md" or resolved.is_dir():
                    problems.append(f"{where}: an anchor on a file that is not a page: {target}")
                elif anchor not in anchors(resolved):
                    problems.append(f"{where}: no heading makes the anchor #{anchor}: {target}")


def summary_pages():
    summary = BOOK / "SUMMARY.md"
    listed = set()
    for _, line in prose_lines(summary.read_text(encoding="utf-8")):
        for match in LINK.finditer(line):
            if match.group(1):
                listed.add((BOOK / match.group(1).partition("#")[0]).resolve())
    return listed


def main():
    problems = []
    pages = sorted(BOOK.rglob("*.md")) + [ROOT / name for name in TOP_LEVEL]
    for page in pages:
        if not page.exists():
            problems.append(f"{page.relative_to(ROOT)}: missing")
            continue
        check(page, problems)
    listed = summary_pages()
    for page in sorted(BOOK.rglob("*.md")):
        if page.name != "SUMMARY.md" and page.resolve() not in listed:
            problems.append(f"{page.relative_to(ROOT)}: not listed in docs/src/SUMMARY.md")
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(f"{len(problems)} broken link(s) in the docs", file=sys.stderr)
        return 1
    print(f"docs links: {len(pages)} pages checked, every relative link and anchor resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main())
