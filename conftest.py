"""tritonfuzz's pytest entry: decide the platform, then load the plugin.

The platform is decided here, first, before anything imports a kernel module: without a GPU,
Triton's CPU interpreter (TRITON_INTERPRET=1), which @triton.jit binds when it decorates. The
options, profiles, fixtures, hooks and the verdict table live in the plugin (oracles/gate/).
"""

from oracles.platform.device import decide_platform

decide_platform()

pytest_plugins = ["oracles.gate.plugin"]
