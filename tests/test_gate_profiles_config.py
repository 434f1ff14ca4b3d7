"""Profiles (staged, never off) and `[tool.fp8check]` configuration."""

from pathlib import Path

import pytest

from fp8check.cli import main
from fp8check.config import GateConfig, load_config
from fp8check.profiles import PROFILES, get_profile, limits_markdown, limits_table, sqnr_band
from fp8check.targets.chips import TARGETS

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["off", "none", "disabled"])
def test_profiles_cannot_be_switched_off(name):
    with pytest.raises(ValueError, match="never off"):
        get_profile(name)


def test_unknown_profile():
    with pytest.raises(ValueError, match="unknown profile"):
        get_profile("lenient")


def test_explore_loosens_only_the_impact_question():
    strict, explore = PROFILES["strict"], PROFILES["explore"]
    # correctness is the same in every stage: a bug is a bug during a search too
    assert (strict.max_bound_ratio, strict.max_error_ratio, strict.max_abs_bias_z) == (
        explore.max_bound_ratio, explore.max_error_ratio, explore.max_abs_bias_z)
    assert strict.max_bound_ratio == 1.0 and strict.max_error_ratio == 2.0
    assert explore.min_sqnr_db < strict.min_sqnr_db
    assert explore.max_calc_diff > strict.max_calc_diff
    assert explore.impact_atol > strict.impact_atol
    assert strict.min_sqnr_db == 27.0 and explore.min_sqnr_db == 20.0


def test_docs_limits_is_the_table_of_limits():
    """docs/limits.md is generated from the one table (`python -m fp8check.profiles`)."""
    assert (ROOT / "docs" / "limits.md").read_text() == limits_markdown(), (
        "docs/limits.md is stale: python -m fp8check.profiles > docs/limits.md")


def test_the_table_lists_every_layer_with_a_value_per_profile_and_a_source():
    rows = limits_table()
    assert {r.layer for r in rows} == {0, 1, 2, 3}  # layer 4 shares layer 3's curve limits
    for r in rows:
        assert set(r.values) == set(PROFILES) and r.source and r.unit, r
    # layer 0: every resource limit of every chip, as the targets table has it
    chips = {(name, res, lim.value) for name, t in TARGETS.items()
             for res, lim in t.limits.items()}
    listed = {(r.criterion.split("(")[1].rstrip(")"), r.criterion.split(" ")[0],
               r.values["strict"]) for r in rows if r.layer == 0}
    assert listed == chips
    # the layers read the profile: explore is looser than strict on layers 2 and 3
    strict, explore = PROFILES["strict"], PROFILES["explore"]
    assert explore.moe.out_min_sqnr_db < strict.moe.out_min_sqnr_db
    assert explore.curves.max_auc_gap > strict.curves.max_auc_gap


def test_sqnr_bands():
    assert sqnr_band(35.0) == "good"
    assert sqnr_band(30.0) == "acceptable" and sqnr_band(20.0) == "acceptable"
    assert sqnr_band(19.9) == "at-risk"


def test_config_defaults_without_pyproject(tmp_path):
    assert load_config(tmp_path) == GateConfig()


def test_config_reads_tool_table(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.fp8check]\nsuite = "smoke"\nprofile = "explore"\nseed = 7\nlayers = [1]\n'
    )
    cfg = load_config(tmp_path)
    assert (cfg.suite, cfg.profile, cfg.seed, cfg.layers) == ("smoke", "explore", 7, (1,))


@pytest.mark.parametrize(
    "text, msg",
    [
        ('[tool.fp8check]\nsuit = "ci"\n', "unknown"),
        ('[tool.fp8check]\nseed = "zero"\n', 'seed = "zero": expected an integer'),
        ("[tool.fp8check\n", "invalid TOML"),
    ],
)
def test_bad_config_is_a_value_error(tmp_path, text, msg):
    (tmp_path / "pyproject.toml").write_text(text)
    with pytest.raises(ValueError, match=msg):
        load_config(tmp_path)


@pytest.mark.parametrize(
    "text, msg",
    [
        # a comma list as in --layers: the key, the file and what is expected
        ('[tool.fp8check]\nlayers = "1,2"\n',
         '[tool.fp8check] layers = "1,2": expected a list of integers, e.g. layers = [1, 2]'),
        ('[tool.fp8check]\nkernels = [1]\n', "kernels = [1]: expected a list of strings"),
        # not a table: said as such, not as "unknown keys: x"
        ('[tool]\nfp8check = "x"\n', 'tool.fp8check = "x": expected a table'),
        ('tool = "x"\n', 'tool = "x": expected a table'),
        ('[tool.fp8check]\nsuit = "ci"\n', "unknown [tool.fp8check] keys: suit (known: "),
    ],
)
def test_bad_config_names_the_file_and_the_key(tmp_path, monkeypatch, capsys, text, msg):
    (tmp_path / "pyproject.toml").write_text(text)
    with pytest.raises(ValueError) as e:
        load_config(tmp_path)
    assert str(e.value).startswith(f"{tmp_path / 'pyproject.toml'}: ") and msg in str(e.value)
    assert "invalid literal" not in str(e.value) and "unknown keys: x" not in str(e.value)
    monkeypatch.chdir(tmp_path)  # the command line: exit 2, the same one line
    assert main(["gate", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err == f"fp8check: error: {e.value}\n"
