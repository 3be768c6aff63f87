"""README's Layout names every module of the tree, and user-facing text speaks the user's words.

The Layout once said ``lifecycle/`` held ``upgrade`` and ``repair`` (it holds seven modules) and left
out CLI modules; each package bullet of README's "Layout" section must name, in backticks, exactly the
modules of its directory. README, the docs a user reads and the library's docstrings no longer speak
of "seed T-745" or a "stub compactor" (the design record's provenance stays in the test files).
"""

import glob
import os
import re

from objstore_cli.main import cli

COMMANDS = set(cli.commands) | {"objstore", "objstore_cli"}  # and the packages, named in passing
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _layout():
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    start = text.index("\n## Layout\n")
    end = text.index("\n## ", start + 1) if "\n## " in text[start + 1:] else len(text)
    return text[start:end]


def _bullets(layout):
    """{directory: the text of its bullet} for each '- **`src/.../`**' bullet."""
    out = {}
    for m in re.finditer(r"^- \*\*`(src/[\w/]+/)`\*\*(.*?)(?=^- |^\S|\Z)", layout, re.M | re.S):
        out[m.group(1)] = m.group(2)
    return out


def _modules(directory):
    return {os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, directory, "*.py"))} - {"__init__", "__main__"}


def _named(text):
    return set(re.findall(r"`([a-z_][a-z0-9_]*)`", text))


def test_every_package_directory_has_a_bullet():
    bullets = _bullets(_layout())
    dirs = {os.path.relpath(os.path.dirname(p), ROOT) + "/" for p in glob.glob(os.path.join(ROOT, "src", "objstore*", "*", "__init__.py"))}
    dirs |= {"src/objstore_cli/"}
    assert dirs <= set(bullets), f"README's Layout has no bullet for {sorted(dirs - set(bullets))}"


def test_each_bullet_names_exactly_the_modules_of_its_directory():
    bullets = _bullets(_layout())
    for directory, text in bullets.items():
        subpackages = {os.path.basename(os.path.dirname(p)) for p in glob.glob(os.path.join(ROOT, directory, "*", "__init__.py"))}
        have = _modules(directory) | subpackages
        named = _named(text)
        assert have <= named, f"README's Layout, {directory}: missing {sorted(have - named)}"
        stray = named - have - COMMANDS  # a command named in passing (what `log` shows) is not a module
        assert stray == set(), f"README's Layout, {directory}: names what is not there: {sorted(stray)}"


def test_the_top_level_modules_are_named():
    layout = _layout()
    for name in _modules("src/objstore"):
        assert f"src/objstore/{name}.py" in layout or f"`{name}`" in layout, f"README's Layout does not name src/objstore/{name}.py"


TICKET = re.compile(r"T-745|stub compactor", re.I)


def test_user_facing_text_has_no_ticket_words():
    files = [os.path.join(ROOT, "README.md"), *glob.glob(os.path.join(ROOT, "docs", "*.md")),
             *glob.glob(os.path.join(ROOT, "src", "**", "*.py"), recursive=True)]
    found = []
    for path in files:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if TICKET.search(line):
                    found.append(f"{os.path.relpath(path, ROOT)}:{n}: {line.strip()}")
    assert not found, "\n".join(found)
