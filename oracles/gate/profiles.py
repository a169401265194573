"""The project's Hypothesis profiles, registered on import: ci (derandomized, the CI and the
mutant claims), dev (the default), gate (--kernel runs), soak (long runs, climbing targets)."""

from hypothesis import HealthCheck, Phase, settings

# Triton compiles on a first call (seconds on a GPU, per-launch Python under the interpreter):
# no deadlines anywhere, and the slow-data health check is off for the same reason. Function
# fixtures are per-test state (the failure record), which is what the check guards against.
_QUIET = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large]
# Properties report their accuracy margin with hypothesis.target() (Fuzz.record). Hill-climbing it
# is for long runs (soak, HypoFuzz): ci, dev and gate draw exactly what they drew before.
_NO_TARGET = [p for p in Phase if p is not Phase.target]
# Every profile derives from Hypothesis's own default, not from whatever is loaded now: with CI set
# in the environment Hypothesis loads its built-in derandomized "ci" profile at import, and a child
# of that would derandomize soak and the HypoFuzz engine's profile too (HypoFuzz refuses such tests).
_BASE = settings.get_profile("default")
settings.register_profile("ci", parent=_BASE, derandomize=True, max_examples=20, deadline=None, database=None,
                          print_blob=True, suppress_health_check=_QUIET, phases=_NO_TARGET)
settings.register_profile("dev", parent=_BASE, max_examples=40, deadline=None, print_blob=True, suppress_health_check=_QUIET,
                          phases=_NO_TARGET)
settings.register_profile("gate", parent=_BASE, max_examples=400, deadline=None, print_blob=True, suppress_health_check=_QUIET,
                          phases=_NO_TARGET)
settings.register_profile("soak", parent=_BASE, max_examples=5000, deadline=None, print_blob=True, suppress_health_check=_QUIET)
PROFILES = ("ci", "dev", "gate", "soak")
DEFAULT_PROFILE = "dev"
GATE_PROFILE = "gate"  # loaded for --kernel runs unless --hypothesis-profile says otherwise
