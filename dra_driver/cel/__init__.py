"""Kubernetes-compatible CEL for DRA device selectors (DeviceClasses and ResourceClaims).

Selectors see one ``device`` with ``driver``, ``attributes``, ``capacity`` and
``allowMultipleAllocations``, and the libraries Kubernetes offers them:
standard CEL, the strings extension (version 2, as Kubernetes), optional
types, ``cel.bind``, regular expressions (``matches``, ``find``, ``findAll``),
lists (``isSorted``, ``sum``, ``min``, ``max``, ``indexOf``, ``lastIndexOf``),
quantities and semantic versions. ``runtime.py`` is the only module that
touches the CEL runtime; ``environment.py`` describes the compile pipeline
and ``cost.py`` how evaluation is bounded.

Where behaviour differs from a Kubernetes scheduler, and why:

* The runtime stops any evaluation after 10,000 comprehension iterations in
  total (a fixed budget it does not let us change), reported as a runtime
  "cost limit exceeded" error. Only literal lists can get there: a device
  has at most 32 attributes and capacities.
* The runtime's parser and planner refuse trees nested more than 32 levels
  deep (cel-go allows far more), e.g. 40 chained ``+`` or ternaries; ``&&``
  and ``||`` chains are balanced and unaffected.
* ``findAll`` omits empty matches (the runtime's RE2 ``extractAll`` skips
  them; Go's ``FindAllString`` returns them), and ``find``/``findAll`` need
  a literal pattern so its capture groups can be neutralised at compile time.
* The static cost estimate is our own model, not cel-go's estimator: both
  refuse the same kinds of expressions, but their numbers differ near the
  limit; calls into our Python-implemented functions are charged extra.
* ``device`` itself is not a value: its four fields are separate typed
  variables (this is what lets the checker know their types). ``has()`` on
  them is true, as in Kubernetes, but ``device["driver"]`` or passing
  ``device`` around does not compile.
* Looking up an unknown domain gives an empty map when the lookup is
  written on ``device.attributes``/``device.capacity`` directly or on a
  ``cel.bind`` name for them; other routes (say, a list holding the map)
  give the plain missing-key error.
* On a value whose type is only known at run time, a quantity's or
  version's internal fields can be selected (``v.major`` without the
  parentheses reads the field instead of failing); with a known type it is
  a compile error.
* The lists library covers lists of numbers, bools, strings, bytes,
  durations and timestamps; an empty list whose element type is only known
  at run time sums to ``0`` (an int).
* Libraries Kubernetes has but DRA selectors hardly use are absent: URLs,
  IP and CIDR, sets, two-variable comprehensions and the ``format.*``
  validators (the strings extension's ``"...".format([...])`` is there).
  Error texts are the runtime's, not cel-go's.
"""

from dra_driver.cel.device_value import DeviceVariable, device_variable
from dra_driver.cel.environment import CelEnvironment, CompiledSelector, default_environment
from dra_driver.cel.errors import CelCompileError, CelRuntimeError

__all__ = [
    "CelCompileError",
    "CelEnvironment",
    "CelRuntimeError",
    "CompiledSelector",
    "DeviceVariable",
    "default_environment",
    "device_variable",
]
