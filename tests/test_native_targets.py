"""The target table (`fp8check.targets.chips`): every row states its facts; names resolve or are
refused with the known ones listed.  The gate on the two newest rows, v7x and sm_100a, is
`tests/test_native_tpu.py::test_parallel_workers_compile_for_v7x_and_sm_100a`."""

import subprocess
import sys

import pytest

from fp8check.targets.chips import TARGETS, Limit, gpu_targets, parse_targets, target, tpu_targets


def test_every_row_states_its_facts():
    assert list(TARGETS) == ["v5e", "v6e", "v5p", "v7x", "sm_90a", "sm_100a"]
    for t in TARGETS.values():
        assert t.platform in ("tpu", "cuda") and t.chip and t.datapath and t.facts
        assert t.accumulator and t.evidence and t.settle
        assert t.limits and all(isinstance(v, Limit) and v.source and v.unit
                                for v in t.limits.values())
        if t.platform == "tpu":
            assert set(t.limits) == {"vmem_bytes"} and t.capability is None
            assert t.fp8_instruction is None
        else:
            assert {"smem_bytes", "registers", "spill_bytes"} <= set(t.limits)
            assert t.capability and t.fp8_instruction and not t.fp8_mxu
    assert [t.name for t in tpu_targets() if t.fp8_mxu] == ["v7x"]
    assert {t.name: t.fp8_instruction for t in gpu_targets()} == {"sm_90a": "wgmma",
                                                                  "sm_100a": "tcgen05"}
    assert target("tpu7x") is TARGETS["v7x"] and target("v7x").compile_for == "tpu7x:2x2x1"
    assert "tmem_columns" in target("sm_100a").limits
    assert target("v7x").accumulator == "unknown"


@pytest.mark.parametrize("bad", ["v7", "sm_100", "v7x:2x2x1", "h100"])
def test_unknown_target_names_the_known_ones(bad):
    with pytest.raises(ValueError, match="expected a comma list of v5e, v6e, v5p, v7x, "
                                         "sm_90a, sm_100a"):
        parse_targets(bad)


def test_cli_unknown_target_is_exit_2_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "fp8check", "gate", "--layers", "0",
                           "--targets", "v9x", "--no-progress"], capture_output=True,
                          text=True, cwd=tmp_path, timeout=300)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "unknown target v9x" in lines[0] and "sm_100a" in lines[0] and "v7x" in lines[0]
