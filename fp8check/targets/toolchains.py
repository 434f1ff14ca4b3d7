"""What the deviceless toolchains (`fp8check.targets.tpu`, `fp8check.targets.cuda`) share."""


class ToolchainMissing(ValueError):
    """A native compiler this machine lacks (libtpu, Triton's ptxas): one line naming it.
    The gate reports it as bad set-up (exit 2), never as a passed or skipped check."""
