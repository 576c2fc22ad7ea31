"""Settings for every test."""

from __future__ import annotations

from hypothesis import Phase, settings

# hack/mutation.sh runs the tests with this profile: the first failing example kills a mutant,
# and shrinking it to the smallest one (tens of seconds) would only slow the run down.
settings.register_profile("mutation", phases=(Phase.explicit, Phase.reuse, Phase.generate))
