"""The package's layout as installed: every folder with an __init__.py under the four
source roots is a package pyproject.toml lists (a folder it misses is absent from a
wheel, while the editable install of the test run still finds it), and every other
package it lists is a data folder: no Python, its files named in package-data."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_folder_is_listed_in_pyproject():
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    dirs = tool["package-dir"]
    found = set()
    for package, folder in dirs.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            if "__pycache__" in rel.parts:
                continue
            found.add(".".join([package, *rel.parts]))
    listed = set(tool["packages"])
    assert found <= listed
    for data in listed - found:  # e.g. the report's templates
        root, _, rest = data.rpartition(".")
        folder = ROOT / dirs[root] / rest if root in dirs else None
        assert folder is not None and folder.is_dir(), data
        assert not list(folder.glob("*.py")) and tool["package-data"].get(data), data


def test_the_package_says_it_is_typed():
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert (ROOT / "fp8check" / "py.typed").is_file()
    assert "py.typed" in tool["package-data"]["fp8check"]
