"""Writes the sample loss logs of this folder (seeded; rerun to regenerate):

    python tests/data/logs/make_logs.py

For each stack three runs of one loss trend with independent 1% noise: `*_bf16` (the
baseline), `*_fp8` (within noise: its own noise and a 0.2% offset) and `*_drift` (4%
higher by the end, the gap growing linearly from the end of warm-up, a tenth of the run).
Each log is in its stack's exact format (the readers' docstrings cite the source files)
with the noise real logs have: start-up lines, warnings, eval / validation lines, a
restart from a checkpoint that repeats steps (in every `*_fp8` log: the repeated values
are the ones that count), ANSI colours (torchtitan).  `megatron_nan.log` is the FP8 run
with one interval holding a NaN iteration.  TensorBoard event files need torch's
`SummaryWriter` (what Megatron-LM and torchtitan write them with).
"""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ESC = "\x1b["


def trend(t: np.ndarray, n: int) -> np.ndarray:
    return 2.2 + 8.6 * (1 + t / (0.02 * n)) ** -0.7


def runs(rng: np.random.Generator, t: np.ndarray, n: int) -> dict[str, np.ndarray]:
    """bf16, fp8 and drift losses at steps t of an n-step run."""
    base = trend(t, n)
    ramp = np.clip((t - 0.1 * n) / (0.9 * n), 0, 1)
    noise = {k: 1 + 0.01 * rng.standard_normal(len(t)) for k in ("bf16", "fp8", "drift")}
    return {"bf16": base * noise["bf16"], "fp8": base * 1.002 * noise["fp8"],
            "drift": base * (1 + 0.04 * ramp) * noise["drift"]}


def restarted(steps: list[int], at: int, back: int) -> list[tuple[int, bool]]:
    """(step, is_replay) in log order for a run that stops after `at` and resumes from
    the checkpoint at `back`."""
    first = [(s, False) for s in steps if s <= at]
    return first + [(s, s <= at) for s in steps if s > back]


def megatron(rng: np.random.Generator) -> None:
    n, every = 1000, 10
    steps = list(range(every, n + 1, every))
    loss = runs(rng, np.asarray(steps, np.float64), n)
    for name, y in (*loss.items(), ("nan", loss["fp8"])):
        by_step = dict(zip(steps, y, strict=True))
        order = restarted(steps, 600, 500) if name == "fp8" else [(s, False) for s in steps]
        out = ["using world size: 64, data-parallel size: 8, tensor-model-parallel size: 8",
               "------------------------ arguments ------------------------",
               "  log_interval .................................... 10",
               "  train_iters ..................................... 1000",
               "-------------------- end of arguments ---------------------",
               "> building GPT model ...",
               "[after dataloaders are built] datetime: 2025-03-01 09:59:41",
               "training ...",
               "[before the start of training step] datetime: 2025-03-01 09:59:58"]
        for s, replay in order:
            if replay and s == 510:
                out += [" loading checkpoint from /ckpt/fp8 at iteration 500",
                        "  successfully loaded checkpoint from /ckpt/fp8 [ t 1/8, p 1/1 ] "
                        "at iteration 500"]
            v = by_step[s] * (1 + 0.003 * rng.standard_normal()) if replay else by_step[s]
            nan_iters = int(name == "nan" and s == 730)
            lm = "" if nan_iters else f" lm loss: {v:.6E} |"
            out.append(
                f" [2025-03-01 10:{s // 60 % 60:02d}:{s % 60:02d}] iteration {s:8d}/{n:8d} |"
                f" consumed samples: {s * 512:12d} | elapsed time per iteration (ms): "
                f"{1234.5 + rng.normal(0, 20):.1f} | throughput per GPU (TFLOP/s/GPU): "
                f"{401 + rng.normal(0, 5):.1f} | learning rate: {3e-4 * min(1, s / 100):.6E} |"
                f" global batch size:   512 |{lm} loss scale: 1.0 | grad norm: "
                f"{abs(rng.normal(1.2, 0.3)):.3f} | number of skipped iterations:   0 | "
                f"number of nan iterations: {nan_iters:3d} |")
            if s == 10:
                out.append("[Rank 0] (after 10 iterations) memory (MB) | allocated: 21034.5 "
                           "| max allocated: 40211.9 | reserved: 43010.0 | max reserved: "
                           "43010.0")
            if s % 250 == 0:
                out += ["-" * 100,
                        f" validation loss at iteration {s} | lm loss value: "
                        f"{by_step[s] * 1.01:.6E} | lm loss PPL: "
                        f"{math.exp(by_step[s] * 1.01):.6E} |", "-" * 100]
            if s == 300:
                out.append("/usr/local/lib/python3.12/dist-packages/torch/distributed/"
                           "c10d_logger.py:83: UserWarning: barrier(): using the device "
                           "under current context.")
        (HERE / f"megatron_{name}.log").write_text("\n".join(out) + "\n")


def torchtitan(rng: np.random.Generator) -> None:
    n, every = 1000, 10
    steps = [1, *range(every, n + 1, every)]
    loss = runs(rng, np.asarray(steps, np.float64), n)
    c = {"red": f"{ESC}31m", "green": f"{ESC}32m", "orange": f"{ESC}38;2;255;165;0m",
         "turq": f"{ESC}38;2;54;234;195m", "blue": f"{ESC}34m", "cyan": f"{ESC}36m",
         "magenta": f"{ESC}35m", "yellow": f"{ESC}33m", "reset": f"{ESC}39m"}
    pre = "[rank0]:[titan] 2025-03-01 10:{m:02d}:{s:02d},{ms:03d} - root - INFO - "
    for name, y in loss.items():
        by_step = dict(zip(steps, y, strict=True))
        order = restarted(steps, 600, 500) if name == "fp8" else [(s, False) for s in steps]
        out = [pre.format(m=0, s=1, ms=5) + "Starting job: Llama 3 8B training",
               pre.format(m=0, s=9, ms=77) + f"{c['red']}Model llama3 8B "
               f"{c['blue']}size: 8,030,261,248 total parameters{c['reset']}",
               pre.format(m=0, s=12, ms=1) + "Training starts at step 1."]
        for s, replay in order:
            if replay and s == 510:
                out.append(pre.format(m=30, s=0, ms=0) + "Loading the checkpoint from "
                           "./outputs/checkpoint/step-500.")
            v = by_step[s] * (1 + 0.003 * rng.standard_normal()) if replay else by_step[s]
            out.append(pre.format(m=s // 60 % 60, s=s % 60, ms=int(rng.integers(1000)))
                       + f"{c['red']}step: {s:2}  {c['green']}loss: {v:8.5f}  "
                       f"{c['orange']}grad_norm: {abs(rng.normal(1.1, 0.2)):7.4f}  "
                       f"{c['turq']}memory: 61.27GiB(77.41%)  {c['blue']}tps: "
                       f"{round(7100 + rng.normal(0, 50)):,}  {c['cyan']}tflops: 411.20  "
                       f"{c['magenta']}mfu: 41.58%{c['reset']}")
            if s % 500 == 0:
                out.append(pre.format(m=s // 60 % 60, s=s % 60, ms=999)
                           + f"{c['yellow']}validate step: {s:2}  {c['green']}loss: "
                           f"{by_step[s] * 1.02:7.4f}  {c['blue']}memory: 63.11GiB(79.73%)"
                           f"{c['reset']}")
            if s == 200:
                out.append("[rank0]:/usr/lib/python3/dist-packages/torch/_inductor/"
                           "compile_fx.py:236: UserWarning: TensorFloat32 tensor cores for "
                           "float32 matrix multiplication available but not enabled.")
        (HERE / f"torchtitan_{name}.log").write_text("\n".join(out) + "\n")


def maxtext(rng: np.random.Generator) -> None:
    n = 200
    steps = list(range(n))
    loss = runs(rng, np.asarray(steps, np.float64), n)
    pre = "I0301 10:{m:02d}:{s:02d}.{us:06d} 139872 metric_logger.py:167] "
    for name, y in loss.items():
        by_step = dict(zip(steps, y, strict=True))
        order = restarted(steps, 120, 99) if name == "fp8" else [(s, False) for s in steps]
        recs, con = [], [
            "I0301 10:00:01.000001 139872 pyconfig.py:271] Updating keys from env and command "
            "line: ['run_name', 'model_name', 'steps', 'metrics_file']",
            "W0301 10:00:09.120331 139872 train.py:110] WARNING: "
            "jax.config.update('jax_default_prng_impl') ignored"]
        for s, replay in order:
            v = by_step[s] * (1 + 0.003 * rng.standard_normal()) if replay else by_step[s]
            if replay and s == 100:
                con.append("I0301 10:20:00.000000 139872 checkpointing.py:210] restoring "
                           "from this run's directory step 99")
            m = {"learning/current_learning_rate": 3e-4 * min(1, (s + 1) / 20),
                 "learning/grad_norm": abs(rng.normal(1.0, 0.2)),
                 "learning/loss": v, "learning/moe_lb_loss": 0.0102,
                 "learning/param_norm": 612.3 + 0.01 * s,
                 "learning/raw_grad_norm": abs(rng.normal(1.0, 0.2)),
                 "learning/total_weights": 262144.0,
                 "perf/per_device_tflops": 361.25, "perf/per_device_tflops_per_sec": 301.4,
                 "perf/per_device_tokens": 16384.0,
                 "perf/per_device_tokens_per_sec": 13652.3,
                 "perf/step_time_seconds": 1.2 + rng.normal(0, 0.01), "step": float(s),
                 "run_name": f"llama2-7b-{name}"}
            recs.append(json.dumps(m))
            if s % 50 == 49:
                recs.append(json.dumps({"eval/avg_loss": by_step[s] * 1.02,
                                        "eval/total_weights": 65536.0, "step": float(s),
                                        "run_name": f"llama2-7b-{name}"}))
            con.append(pre.format(m=s // 60 % 60, s=s % 60, us=int(rng.integers(10**6)))
                       + f"completed step: {s}, seconds: {m['perf/step_time_seconds']:.3f}, "
                       f"TFLOP/s/device: 301.412, Tokens/s/device: 13652.301, total_weights: "
                       f"262144, loss: {v:.3f}")
            if s % 100 == 0:
                con.append(pre.format(m=s // 60 % 60, s=s % 60, us=999999) + "To see full "
                           "metrics 'tensorboard --logdir=gs://bucket/run/tensorboard/'")
        (HERE / f"maxtext_{name}.jsonl").write_text("\n".join(recs) + "\n")
        (HERE / f"maxtext_{name}.log").write_text("\n".join(con) + "\n")


def wandb(rng: np.random.Generator) -> None:
    n = 500
    steps = list(range(0, n, 5))
    loss = runs(rng, np.asarray(steps, np.float64), n)
    for name, y in loss.items():
        with (HERE / f"wandb_{name}.csv").open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["_step", "_runtime", "_timestamp", "train/loss", "train/lr",
                        "train/grad_norm", "eval/loss"])
            for s, v in zip(steps, y, strict=True):
                w.writerow([s, f"{2.1 * s + 30:.4f}", f"{1740823200 + 2.1 * s:.4f}",
                            repr(float(v)), 3e-4 * min(1, s / 50),
                            repr(abs(float(rng.normal(1, 0.2)))), ""])
                if s % 100 == 95:  # an eval row: no training loss
                    w.writerow([s, f"{2.1 * s + 31:.4f}", f"{1740823201 + 2.1 * s:.4f}",
                                "", "", "", repr(float(v * 1.02))])
    runs_ = {"fp8-e4m3": loss["fp8"], "bf16-baseline": loss["bf16"],
             "fp8-drift": loss["drift"]}
    with (HERE / "wandb_panel.csv").open("w", newline="") as f:
        w = csv.writer(f, quoting=csv.QUOTE_ALL)
        w.writerow(["Step"] + [f"{r} - train/loss{x}" for r in runs_
                               for x in ("", "__MIN", "__MAX")])
        for i, s in enumerate(steps):
            row: list[object] = [s]
            for r, y in runs_.items():
                missing = r == "bf16-baseline" and s % 50 == 25  # a point this run lacks
                row += ["", "", ""] if missing else [y[i], y[i], y[i]]
            w.writerow(row)


def tensorboard(rng: np.random.Generator) -> None:
    from torch.utils.tensorboard import SummaryWriter

    n, every = 1000, 10
    steps = list(range(every, n + 1, every))
    loss = runs(rng, np.asarray(steps, np.float64), n)
    for name, y in loss.items():
        d = HERE / f"tb_{name}"
        shutil.rmtree(d, ignore_errors=True)
        tb = SummaryWriter(str(d), filename_suffix=".host")
        for s, v in zip(steps, y, strict=True):
            tb.add_scalar("lm loss", float(v), s)
            tb.add_scalar("learning-rate", 3e-4 * min(1, s / 100), s)
            tb.add_scalar("grad-norm", abs(float(rng.normal(1.2, 0.3))), s)
        tb.close()
        for p in d.iterdir():  # a stable name: the writer's carries host and time
            p.rename(d / "events.out.tfevents.1740823200.host")


def main() -> None:
    rng = np.random.default_rng(25)
    megatron(rng)
    torchtitan(rng)
    maxtext(rng)
    wandb(rng)
    tensorboard(rng)


if __name__ == "__main__":
    main()
