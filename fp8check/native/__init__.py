"""Native compilation without hardware: TPU chips through libtpu's deviceless AOT compiler
(`tpu`), Hopper sm_90a through Triton's AOT compiler and the ptxas in its wheel (`hopper`).
Compiling is not running: these modules say what the compiler produced, not what the
hardware computes."""


class ToolchainMissing(ValueError):
    """A native compiler this machine lacks (libtpu, Triton's ptxas): one line naming it.
    The gate reports it as bad set-up (exit 2), never as a passed or skipped check."""
