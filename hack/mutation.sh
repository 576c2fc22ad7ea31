#!/usr/bin/env bash
# Mutation testing (not part of the default test run): mutmut changes one thing at a time in the
# modules listed under [tool.mutmut] in pyproject.toml and runs the tests that cover it; a mutant
# that no test notices is a gap (or an equivalent change). Scores go to docs/testing.md, each
# survivor with its verdict to hack/mutation-survivors.tsv.
# Usage: hack/mutation.sh [--all-tests] [--max-children N] [--only GLOB] [MODULE...]
#   e.g. hack/mutation.sh controller.writer
#   MODULE is a dotted module or package name; without one, every module of the table below is
#   run, one after the other.
#   By default a module is run with the tests of its row in the table below (a module without a
#   row gets the configured set); --all-tests uses the set configured in pyproject.toml
#   (pytest_add_cli_args_test_selection) for every module. --max-children caps the mutants run
#   at once (mutmut's default: one per CPU). --only runs only the mutants whose name, after
#   "MODULE.", matches GLOB (fnmatch; may be given several times), e.g. --only '*ǁ_decide__*'
#   for one method of a module too slow to run whole; the counts printed still cover every
#   mutant of the module (those not tried show as "not checked").
# Progress goes to stderr; for each module, its counts and the list of survivors go to stdout.
# A run of another module (or with other tests) starts afresh and replaces the results of the
# last, so run one module at a time and read its results before the next.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=hack/venv.sh
source "$ROOT/hack/venv.sh"
cd "$ROOT"

# The tests that exercise each module. mutmut maps every test to the functions it runs and tries
# a mutant against those only, but each try pays for the set-up of the tests it runs (the plugin
# tests start an API server per module), so a row holds the fastest tests that reach the module:
# unit tests where they cover it, else the plugin tests that drive it in-process. The plugin's
# crash tests are never listed: they run the plugin in a child process, where mutmut records
# nothing, so no mutant is ever tried against them.
PLUGIN="tests/integration/plugin"
# The checker's unit tests, not the property tests that also run it (seconds a mutant).
CHECKER="tests/unit/checker"
# The embedded API server's tests: one server per test file, in-process, so mutmut sees it.
APISERVER="tests/integration/apiserver"
declare -A TESTS=(
  [kubeletplugin.prepare.preparer]="tests/unit/kubeletplugin/test_preparer.py $PLUGIN/test_prepare.py \
$PLUGIN/test_prepare_faults.py $PLUGIN/test_prepare_rules.py $PLUGIN/test_mps.py $PLUGIN/test_recovery.py \
$PLUGIN/test_claim_cache.py"
  [kubeletplugin.prepare.journal]="tests/unit/kubeletplugin/test_journal.py $PLUGIN/test_prepare.py \
$PLUGIN/test_prepare_faults.py"
  [kubeletplugin.prepare.locks]="tests/unit/kubeletplugin/test_locks.py $PLUGIN/test_prepare.py"
  [kubeletplugin.prepare.mig_ops]="tests/unit/kubeletplugin/test_mig_ops.py $PLUGIN/test_prepare.py \
$PLUGIN/test_prepare_faults.py $PLUGIN/test_recovery.py"
  [kubeletplugin.prepare.mps_lifecycle]="tests/unit/kubeletplugin/test_mps_lifecycle.py $PLUGIN/test_mps.py \
$PLUGIN/test_recovery.py"
  [dra_driver.backends.mig]="tests/unit/backends/test_mig_steps.py tests/unit/backends/test_fake_faults.py"
  [kubeletplugin.prepare.recovery]="$PLUGIN/test_recovery.py"
  [kubeletplugin.prepare.sharing]="tests/unit/kubeletplugin/test_sharing.py"
  [kubeletplugin.prepare.container_edits]="tests/unit/kubeletplugin/test_container_edits.py"
  [dra_driver.checkpoint]="tests/unit/checkpoint"
  [controller.writer]="tests/unit/controller/test_writer.py tests/unit/controller/test_reconciler.py \
tests/integration/allocation"
  [controller.decide]="tests/unit/controller/test_decide.py tests/unit/controller/test_view.py"
  [controller.reconciler]="tests/unit/controller/test_reconciler.py tests/unit/controller/test_loop.py \
tests/unit/controller/test_queues.py"
  [dra_driver.checker]="$CHECKER"
  [dra_driver.checker.rules]="$CHECKER"
  [dra_driver.checker.inputs]="$CHECKER"
  [dra_driver.checker.cel_device]="$CHECKER"
  [dra_driver.queues]="tests/unit/queues tests/unit/controller/test_queues.py"
  [controller.queueing]="tests/unit/controller/test_queueing.py tests/unit/controller/test_queues.py"
  [controller.evictions]="tests/unit/controller/test_evictions.py tests/unit/controller/test_queues.py"
  [dra_driver.driverroot]="tests/unit/driverroot tests/unit/kubeletplugin/test_container_edits.py \
$PLUGIN/test_driver_root.py"
  [dra_driver.noderesources]="tests/unit/test_noderesources.py tests/unit/controller/test_node_load.py"
  [controller.node_load]="tests/unit/controller/test_node_load.py tests/integration/allocation/test_node_resources.py"
  [kubeletplugin.mps]="tests/unit/kubeletplugin/test_mps_daemon.py tests/unit/kubeletplugin/test_mps_manager.py \
tests/unit/kubeletplugin/test_mps_lifecycle.py $PLUGIN/test_mps.py $PLUGIN/test_recovery.py"
  [localcluster.storage]="$APISERVER/test_crud.py $APISERVER/test_patch.py $APISERVER/test_strategic_patch.py \
$APISERVER/test_status_subresource.py $APISERVER/test_selectors.py $APISERVER/test_lifecycle.py \
$APISERVER/test_watch.py $APISERVER/test_eviction.py $APISERVER/test_store.py $APISERVER/test_watch_stream.py"
  [localcluster.watch]="$APISERVER/test_watch.py $APISERVER/test_lifecycle.py $APISERVER/test_crud.py \
$APISERVER/test_watch_stream.py"
)
ORDER=(
  dra_driver.checkpoint
  kubeletplugin.prepare.container_edits
  kubeletplugin.prepare.sharing
  kubeletplugin.prepare.recovery
  kubeletplugin.prepare.journal
  kubeletplugin.prepare.locks
  dra_driver.backends.mig
  kubeletplugin.prepare.mig_ops
  kubeletplugin.prepare.mps_lifecycle
  kubeletplugin.prepare.preparer
  controller.writer
  controller.decide
  dra_driver.checker
  controller.reconciler
  dra_driver.queues
  controller.queueing
  controller.evictions
  dra_driver.driverroot
  dra_driver.noderesources
  controller.node_load
  kubeletplugin.mps
  localcluster.storage
  localcluster.watch
)

all_tests=0
only=()
max_children=()
modules=()
while [ $# -gt 0 ]; do
  case "$1" in
    --all-tests) all_tests=1 ;;
    --max-children) max_children=(--max-children "$2"); shift ;;
    --max-children=*) max_children=(--max-children "${1#*=}") ;;
    --only) only+=("$2"); shift ;;
    --only=*) only+=("${1#*=}") ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "unknown option: $1" >&2; exit 2 ;;
    *) modules+=("$1") ;;
  esac
  shift
done
if [ ${#modules[@]} -eq 0 ]; then
  modules=("${ORDER[@]}")
fi

if ! python -c 'import mutmut' >/dev/null 2>&1; then
  echo "mutmut is missing: install the test extra (pip install -e '.[test]')" >&2
  exit 1
fi

# mutmut reads its configuration from pyproject.toml only; this runs its command line with two
# settings of its configuration object (read once per process) replaced: the tests, by the
# module's row, and the code it mutates, by the module alone (the rest of the tree is copied
# unchanged through also_copy), which spares generating every other module's mutants again.
run_mutmut() {
  local selection="$1" source="$2"
  shift 2
  MUTATION_TESTS="$selection" MUTATION_SOURCE="$source" python - "$@" <<'EOF'
import os
import shlex
import sys
from pathlib import Path

from mutmut.__main__ import cli
from mutmut.configuration import config

selection = os.environ["MUTATION_TESTS"]
if selection:
    config().pytest_add_cli_args_test_selection = shlex.split(selection)
source = os.environ["MUTATION_SOURCE"]
if source:
    config().source_paths = [Path(source)]
    config().resolved_mutated_source_paths = [Path.cwd().resolve() / "mutants" / source]
cli(sys.argv[1:])
EOF
}

for module in "${modules[@]}"; do
  selection=""
  if [ "$all_tests" -eq 0 ]; then
    selection="${TESTS[$module]:-}"
  fi
  source="${module//.//}"
  if [ -d "$source" ]; then
    source="$source/"
  elif [ -f "$source.py" ]; then
    source="$source.py"
  else
    echo "no module ${module} (neither ${source}/ nor ${source}.py)" >&2
    exit 2
  fi
  # mutmut keeps which tests reach which function (and its results) in mutants/, and collects
  # that again only when the test set changes: after a module run with the same tests (the
  # checker's), it would find no test for this one. A run of another module starts afresh.
  run_key="${source} ${selection}"
  if [ -d mutants ] && [ "$(cat mutants/.mutation-run 2>/dev/null)" != "$run_key" ]; then
    rm -rf mutants
  fi
  mkdir -p mutants
  printf '%s\n' "$run_key" > mutants/.mutation-run
  echo "==> mutmut run ${module} with ${selection:-the configured tests}" >&2
  # mutmut prints its progress on stdout.
  patterns=("${module}.*")
  if [ ${#only[@]} -gt 0 ]; then
    patterns=("${only[@]/#/${module}.}")
  fi
  run_mutmut "$selection" "$source" run "${max_children[@]}" "${patterns[@]}" >&2
  echo "==> ${module}"
  run_mutmut "$selection" "$source" results --all true | awk -v module="$module" '
    {
      key = $1; sub(/:$/, "", key); state = $0; sub(/^[^:]*: /, "", state)
      if (index(key, module ".") != 1) next
      total++; count[state]++
      if (state != "killed") print
    }
    END {
      printf "%s: %d mutants, %d killed, %d survived", module, total, count["killed"], count["survived"]
      for (s in count) if (s != "killed" && s != "survived") printf ", %d %s", count[s], s
      printf "\n"
    }'
done
