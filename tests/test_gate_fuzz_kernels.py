"""Fuzzing the gate with hostile kernels (issue 22): a real `fp8check gate` process on one
smoke case runs a correct numpy kernel beside a few drawn hostile ones (that exit, raise
BaseException subclasses, return odd types, mutate their inputs in place or sleep past
`--timeout`).  Whatever they do: exit 1 (never 0, never 3), no traceback on stderr, a JSON
document with a failed or error result for each hostile kernel, the correct kernel's
result passed (its inputs were not corrupted by the others), the kernel file unchanged.

Each example is a gate process whose crashed workers are respawned (~10-30 s here), so
the example count (`FUZZ_HOSTILE_KERNELS` in `fp8check.inputs.hypothesis_profiles`) is small and
each example draws several hostile kernels.
"""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET

from fuzz_support import CASE, GOOD_KERNEL, GOOD_NAME, check_contract, digests
from hypothesis import HealthCheck, event, example, given
from hypothesis import strategies as st

from fp8check.inputs.hypothesis_profiles import fuzz_settings
from fp8check.results import read_document

# name -> body of a kernel `def NAME(lhs_q, lhs_scale, rhs_q, rhs_scale, group_sizes,
# out_dtype=np.float32)`; `ref(...)` is the correct kernel's output
HOSTILE = {
    "sys_exit_0": "sys.exit(0)",
    "sys_exit_none": "sys.exit()",
    "os_exit_0": "os._exit(0)",
    "os_exit_7": "os._exit(7)",
    "keyboard_interrupt": "raise KeyboardInterrupt",
    "system_exit_str": "raise SystemExit('done')",
    "generator_exit": "raise GeneratorExit",
    "custom_base_exception": "raise Custom('from the kernel')",
    "value_error": "raise ValueError('bad\\nmultiline \\x1b[31m\\x00 \\ud800')",
    "return_none": "return None",
    "return_list": "return ref(*a).tolist()",
    "return_str": "return 'out'",
    "return_dict": "return {'out': ref(*a)}",
    "return_tuple": "return (ref(*a), ref(*a))",
    "wrong_shape": "return ref(*a)[:-1]",
    "transposed": "return np.ascontiguousarray(ref(*a).T)",
    "wrong_dtype": "return ref(*a).astype(np.float16)",
    "int_dtype": "return ref(*a).astype(np.int64)",
    "object_array": "return ref(*a).astype(object)",
    "nan_array": "return np.full_like(ref(*a), np.nan)",
    "scalar": "return np.float32(0)",
    "mutate_then_compute": "a[0][...] = 0; a[3][...] = 1e30; return ref(*a)",
    "mutate_scales": "a[1][...] *= 2; return ref(*a)",
    "mutate_group_sizes": "a[4][...] = a[4][::-1].copy(); return ref(*a)",
    "sleep_past_timeout": "time.sleep(60)",
    "print_traceback": "traceback.print_stack(); raise RuntimeError('x')",
    "recursion": "return k_recursion(*a)",
    "evil_array": "return Evil()",
    "huge_alloc": "return np.ones((1 << 40,), np.uint8)",
}
# correct outputs: not required to fail (after mutating the inputs afterwards, the gate
# may pass them only if it hands every call its own copy; it does)
MAY_PASS = {"mutate_after": "out = ref(*a); a[0][...] = 0; a[1][...] = 7; return out",
            # the right values in an ndarray subclass whose methods are hostile: the gate
            # judges the values (np.asarray), never calls them
            "evil_subclass": "return ref(*a).view(EvilArray)"}
TIMEOUT_S = 4


def _kernel_file(names: list[str]) -> str:
    src = [GOOD_KERNEL, "import os, time, traceback\nimport numpy as np\n",
           "class Custom(BaseException):\n    pass\n",
           "class Evil:  # an array-like whose conversion raises\n"
           "    shape = (256, 256)\n    dtype = np.float32\n"
           "    def __array__(self, *a, **k):\n        raise KeyboardInterrupt\n"
           "    def __getattr__(self, name):\n        raise SystemExit(0)\n",
           "class EvilArray(np.ndarray):  # right values, hostile methods\n"
           "    def __eq__(self, other):\n        raise GeneratorExit\n"
           "    def __array_finalize__(self, obj):\n        pass\n"
           "    def __float__(self):\n        os._exit(0)\n",
           "def ref(*a):\n    return good.fn(*a)\n"]
    for name in names:
        body = {**HOSTILE, **MAY_PASS}[name]
        src.append(f"def k_{name}(*a):\n    {body}\n")
    return "\n".join(src)


@fuzz_settings("FUZZ_HOSTILE_KERNELS",
               suppress_health_check=[HealthCheck.function_scoped_fixture,
                                      HealthCheck.too_slow])
@given(names=st.lists(st.sampled_from(sorted(HOSTILE) + sorted(MAY_PASS)), min_size=3,
                      max_size=6, unique=True).filter(lambda n: set(n) - set(MAY_PASS)))
@example(names=["value_error", "os_exit_0", "mutate_after"])
def test_hostile_kernels_never_turn_the_gate_green(names, tmp_path_factory):
    for n in names:
        event(n)  # --hypothesis-show-statistics: which behaviours ran
    d = tmp_path_factory.mktemp("hostile")
    path = d / "hostile.py"
    path.write_text(_kernel_file(names))
    before = digests([path])
    order = ["good", *[f"k_{n}" for n in names]]
    argv = ["gate", "--no-progress", "--suite", "smoke", "--layers", "1", "--case", CASE,
            "--contract", "gmm-fp8", "--framework", "numpy", "--timeout", str(TIMEOUT_S),
            "--json", str(d / "g.json"), "--junit", str(d / "g.xml"),
            *[a for k in order for a in ("--kernel", f"{path}:{k}")]]
    proc = subprocess.run([sys.executable, "-m", "fp8check", *argv], cwd=d, text=True,
                          capture_output=True, timeout=300)
    check_contract(argv, proc.returncode, proc.stdout, proc.stderr)
    assert proc.returncode == 1, f"{names}: exit {proc.returncode}\n{proc.stderr[-2000:]}"
    assert digests([path]) == before
    ET.parse(d / "g.xml")  # well-formed, whatever the kernels' errors say
    doc = read_document(d / "g.json")  # the gate's document reads back
    assert not doc["summary"]["passed"]
    by_kernel: dict[str, list[dict]] = {}
    for r in doc["results"]:
        by_kernel.setdefault(r["kernel"], []).append(r)
    assert by_kernel.get(GOOD_NAME) and all(r["passed"] for r in by_kernel[GOOD_NAME]), \
        f"{names}: the correct kernel's results: {by_kernel.get(GOOD_NAME)}"
    for n in names:
        results = [r for k, rs in by_kernel.items() if k.endswith(f"k_{n}") for r in rs]
        assert results, f"{names}: no result for k_{n} ({sorted(by_kernel)})"
        if n in HOSTILE:
            assert not any(r["passed"] for r in results), f"k_{n} passed: {results}"
