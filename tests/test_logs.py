"""Layer 4's log readers (`fp8check.logs`) on the sample logs of `tests/data/logs/`
(written by its `make_logs.py` in each stack's exact format) and on broken logs: the
verdicts of `fp8check curves`, detection, the noise real logs carry, and errors that name
the file and line."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from fp8check.cli import main
from fp8check.logs import LogOptions, read_log
from fp8check.logs.detect import detect
from fp8check.measures.curves import load_curve

LOGS = Path(__file__).resolve().parent / "data" / "logs"

# stack -> (fp8, drift, bf16, the format detected)
STACKS = {
    "megatron": ("megatron_fp8.log", "megatron_drift.log", "megatron_bf16.log", "megatron"),
    "torchtitan": ("torchtitan_fp8.log", "torchtitan_drift.log", "torchtitan_bf16.log",
                   "torchtitan"),
    "maxtext-metrics": ("maxtext_fp8.jsonl", "maxtext_drift.jsonl", "maxtext_bf16.jsonl",
                        "maxtext"),
    "maxtext-console": ("maxtext_fp8.log", "maxtext_drift.log", "maxtext_bf16.log",
                        "maxtext-log"),
    "wandb-history": ("wandb_fp8.csv", "wandb_drift.csv", "wandb_bf16.csv", "wandb"),
    "tensorboard": ("tb_fp8", "tb_drift", "tb_bf16", "tensorboard"),
}


def _log_values(path: Path, pattern: str) -> dict[int, float]:
    """step -> loss of the lines matching `pattern` (groups: step, loss), last one winning:
    an independent reading of the sample, to hold the readers to."""
    out = {}
    for line in path.read_text().splitlines():
        m = re.search(pattern, re.sub(r"\x1b\[[0-9;]*m", "", line))
        if m:
            out[int(m.group(1))] = float(m.group(2))
    return out


@pytest.mark.parametrize("stack", list(STACKS))
def test_fp8_within_noise_passes_and_a_4pct_drift_fails(stack, capsys):
    fp8, drift, bf16, fmt = STACKS[stack]
    for name in (fp8, drift, bf16):
        assert detect(LOGS / name) == fmt
    assert main(["curves", str(LOGS / fp8), str(LOGS / bf16)]) == 0
    out = capsys.readouterr().out
    assert f"read as {fmt}" in out and "PASS" in out
    assert main(["curves", str(LOGS / drift), str(LOGS / bf16)]) == 1
    out = capsys.readouterr().out
    assert "FAIL auc_gap" in out and "FAIL final_gap" in out


def test_wandb_panel_export_picks_runs(capsys):
    panel = str(LOGS / "wandb_panel.csv")
    assert detect(LOGS / "wandb_panel.csv") == "wandb-panel"
    assert main(["curves", panel, panel, "--run", "fp8-e4m3", "bf16-baseline"]) == 0
    assert main(["curves", panel, panel, "--run", "fp8-drift", "bf16-baseline"]) == 1
    capsys.readouterr()
    base = read_log(panel, LogOptions(run="bf16-baseline"))
    assert len(base.steps) == 90 and not np.isin(base.steps % 50, 25).any()  # its gaps
    assert main(["curves", panel, panel]) == 2
    assert "3 runs in this panel export: fp8-e4m3, bf16-baseline, fp8-drift (use --run)" \
        in capsys.readouterr().err
    with pytest.raises(ValueError, match="no run 'fp9'; found runs: fp8-e4m3"):
        read_log(panel, LogOptions(run="fp9"))


def test_megatron_reads_iteration_lines_only_and_the_restart_wins():
    path = LOGS / "megatron_fp8.log"
    c = load_curve(str(path))
    want = _log_values(path, r"iteration\s+(\d+)/.*?\| lm loss: (\S+) \|")
    assert c.steps.tolist() == list(range(10, 1001, 10)) == sorted(want)
    assert c.loss.tolist() == [want[s] for s in c.steps]  # the replayed 510..600 values
    assert any("10 repeated steps" in n for n in c.notes)
    text = path.read_text()
    assert "validation loss at iteration 500" in text  # not a record: its value differs
    nan = load_curve(str(LOGS / "megatron_nan.log"))
    assert np.isnan(nan.loss[nan.steps == 730]).all() and np.isfinite(nan.loss).sum() == 99


def test_console_logs_skip_validation_lines_and_colours():
    tt = LOGS / "torchtitan_bf16.log"
    assert "\x1b[31mstep:" in tt.read_text() and "validate step: 500" in tt.read_text()
    want = _log_values(tt, r"(?<!validate )step:\s*(\d+)\s+loss:\s*(\S+)")
    rec = read_log(str(tt))
    assert rec.steps.tolist() == sorted(want) and rec.loss.tolist() == [want[s] for s in
                                                                          sorted(want)]
    mt = read_log(str(LOGS / "maxtext_bf16.log"))
    metrics = read_log(str(LOGS / "maxtext_bf16.jsonl"))
    assert mt.steps.tolist() == metrics.steps.tolist() == list(range(200))  # eval: skipped
    assert np.allclose(mt.loss, metrics.loss, atol=5e-4)  # the console prints 3 decimals


def test_keys_can_be_named():
    wb = read_log(str(LOGS / "wandb_fp8.csv"), LogOptions(loss_key="train/grad_norm"))
    assert 0.2 < float(np.median(wb.loss)) < 2
    mt = read_log(str(LOGS / "maxtext_fp8.jsonl"), LogOptions(loss_key="eval/avg_loss"))
    assert mt.steps.tolist() == [49, 99, 149, 199]
    tb = read_log(str(LOGS / "tb_bf16"), LogOptions(loss_key="grad-norm"))
    assert len(tb.steps) == 100 and float(tb.loss.max()) < 3
    meg = read_log(str(LOGS / "megatron_bf16.log"), LogOptions(loss_key="grad norm"))
    assert len(meg.steps) == 100 and float(meg.loss.max()) < 3
    csv = read_log(str(LOGS / "wandb_fp8.csv"),
                   LogOptions(fmt="csv", step_key="_runtime", loss_key="train/loss"))
    assert csv.fmt == "csv" and csv.steps[0] == 30.0
    with pytest.raises(ValueError, match=r"--run does not apply to megatron logs"):
        read_log(str(LOGS / "megatron_bf16.log"), LogOptions(run="x"))


def _copy_with(tmp_path: Path, name: str, lineno: int, edit) -> Path:
    lines = (LOGS / name).read_text().splitlines(keepends=True)
    lines[lineno - 1] = edit(lines[lineno - 1])
    out = tmp_path / name
    out.write_text("".join(lines))
    return out


def test_errors_name_the_file_and_the_real_line(tmp_path, capsys):
    meg = _copy_with(tmp_path, "megatron_bf16.log", 31,
                     lambda s: s.replace("lm loss: ", "lm loss: x"))
    with pytest.raises(ValueError, match=rf"^{re.escape(str(meg))}:31: bad lm loss 'x"):
        read_log(str(meg))
    tt = _copy_with(tmp_path, "torchtitan_bf16.log", 31, lambda s: s.replace("loss: ", "loss: ?"))
    with pytest.raises(ValueError, match=r"torchtitan_bf16.log:31: bad loss '\?"):
        read_log(str(tt))
    mj = _copy_with(tmp_path, "maxtext_bf16.jsonl", 31, lambda s: s[:40] + "\n")
    with pytest.raises(ValueError, match=r"maxtext_bf16.jsonl:31: not JSON"):
        read_log(str(mj))
    wb = _copy_with(tmp_path, "wandb_bf16.csv", 31,
                    lambda s: ",".join(["oops" if i == 3 else f for i, f in
                                        enumerate(s.split(","))]))
    with pytest.raises(ValueError, match=r"wandb_bf16.csv:31: bad "):
        read_log(str(wb))
    assert main(["curves", str(meg), str(LOGS / "megatron_bf16.log")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ":31: bad lm loss" in err


def test_errors_say_which_keys_were_found(tmp_path):
    p = tmp_path / "run.jsonl"
    p.write_text('{"step": 1, "learning/lr": 0.1, "acc": 0.5}\n')
    with pytest.raises(ValueError, match=r"run.jsonl: no loss key; found keys: step, "
                                         r"learning/lr, acc \(use --loss-key\)"):
        read_log(str(p))
    with pytest.raises(ValueError, match=r"no step key 'it'; found keys: step, "):
        read_log(str(p), LogOptions(step_key="it"))
    with pytest.raises(ValueError, match=r"tb_bf16: no loss key 'nope'; found keys: "
                                         r"lm loss, learning-rate, grad-norm"):
        read_log(str(LOGS / "tb_bf16"), LogOptions(loss_key="nope"))
    other = tmp_path / "other.log"
    other.write_text("hello\nworld\n")
    with pytest.raises(ValueError, match=r"other.log: no step key; found keys: hello"):
        read_log(str(other))
    with pytest.raises(ValueError, match=r"other.log: no \(step, loss\) records in this "
                                         r"megatron log"):
        read_log(str(other), LogOptions(fmt="megatron"))


def test_binary_and_event_file_problems_name_the_file(tmp_path, monkeypatch):
    blob = tmp_path / "weights.bin"
    blob.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(ValueError, match=r"weights.bin: a binary file, not a loss log"):
        read_log(str(blob))
    with pytest.raises(ValueError, match=r"weights.bin: not a text file \(byte 0x80 at "
                                         r"offset 128 is not UTF-8\); expected a csv log"):
        read_log(str(blob), LogOptions(fmt="csv"))
    fake = tmp_path / "events.out.tfevents.1.host"
    fake.write_bytes(b"\x00\x01garbage" * 10)
    with pytest.raises(ValueError, match=r"events.out.tfevents.1.host: no scalars in 1 "
                                         r"TensorBoard event file\(s\)"):
        read_log(str(fake))
    tb = tmp_path / "tb"
    shutil.copytree(LOGS / "tb_fp8", tb)
    monkeypatch.setitem(sys.modules, "tensorboard.backend.event_processing.event_file_loader",
                        None)
    with pytest.raises(ValueError, match=r"needs the tensorboard package: pip install "
                                         r"'fp8check\[tensorboard\]'"):
        read_log(str(tb))


def test_a_restarted_tensorboard_run_keeps_the_later_files_steps(tmp_path):
    tb = tmp_path / "tb"
    tb.mkdir()
    shutil.copy(LOGS / "tb_bf16" / "events.out.tfevents.1740823200.host",
                tb / "events.out.tfevents.1740823200.host")
    shutil.copy(LOGS / "tb_fp8" / "events.out.tfevents.1740823200.host",
                tb / "events.out.tfevents.1740829999.host")  # the resumed run's file
    c = load_curve(str(tb))
    fp8 = load_curve(str(LOGS / "tb_fp8"))
    assert np.array_equal(c.loss, fp8.loss) and any("100 repeated" in n for n in c.notes)


@pytest.mark.parametrize("key", ["loss_metrics/global_avg_loss", "lm loss", "learning/loss",
                                 "train/loss"])
def test_each_stacks_own_loss_key_is_found_without_flags(tmp_path, key):
    """W&B history of a torchtitan, Megatron-LM, MaxText or generic run: the stack's loss
    key is a default, other metrics beside it are not taken for it."""
    p = tmp_path / "history.csv"
    p.write_text(f"_step,grad_norm,{key},lr\n" + "".join(f"{s},1.5,{9 - s},0.1\n"
                                                          for s in range(5)))
    rec = read_log(str(p))
    assert rec.fmt == "wandb" and rec.loss.tolist() == [9, 8, 7, 6, 5]
