#!/usr/bin/env bash
# The mutation check of the feed-forward functions: their tests must catch
# each of the mutants in tests/hardening/mutants/ (one sed script per mutant;
# its first line "# target: FILE" names the file it mutates, every other
# non-comment line is one sed command that must change that file).
#
# The source tree (git ls-files plus untracked, non-ignored files) is copied to
# a work directory. Every mutant must still apply to it, each command on its
# own, before anything is built: a mutant whose target file is gone, or one of
# whose commands changes nothing (its pattern no longer matches after a
# refactor of the target), stops the run within seconds with a message naming
# the mutant, the target and the line of the mutant to update. Then the tree
# is built once in one build dir there (ccache, Release, no bench/demos) and
# the unmutated suite must pass. Then, for each mutant: apply it to the copy,
# rebuild incrementally only the test executables below, run them and require
# that at least one fails; restore the file. A mutant whose mutated tree does
# not build is a failure of this script too.
#
#   tests/hardening/mutants.sh [MUTANT...]     MUTANT = a file name in tests/hardening/mutants/, with
#                                    or without .sed; default: all of them
# Environment:
#   XTGRAD_MUTANTS_DIR      work directory (default ${TMPDIR:-/tmp}/xtgrad-mutants-$UID;
#                           a fixed path, so ccache hits across runs; wiped at start)
#   XTGRAD_MUTANTS_KEEP=1   keep the work directory (logs in logs/) afterwards
#   XTGRAD_MUTANTS_JOBS     build jobs (default 2)
#   XTGRAD_MUTANTS_TIMEOUT  seconds per test executable run (default 600)
#
# Output: a table (mutant, killed, the failing test cases), then the CI line
#   mutants: N passed, M failed
# (passed = killed). Exit status 0 only when every mutant is killed.
set -euo pipefail

tests_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source_dir=$(cd "$tests_dir/../.." && pwd)
mutant_dir="$tests_dir/mutants"
work=${XTGRAD_MUTANTS_DIR:-${TMPDIR:-/tmp}/xtgrad-mutants-$(id -u)}
jobs=${XTGRAD_MUTANTS_JOBS:-2}
run_timeout=${XTGRAD_MUTANTS_TIMEOUT:-600}

# The executables whose tests are meant to kill the mutants.
targets=(test_functional test_ffn_modules test_activations test_gated)
[[ -f $source_dir/tests/hardening/test_mutant_guards.cpp ]] && targets+=(test_mutant_guards)

die() {
  echo "mutants.sh: $*" >&2
  exit 2
}

# --- which mutants ----------------------------------------------------------
mutants=()
if (($# == 0)); then
  for f in "$mutant_dir"/*.sed; do [[ -e $f ]] && mutants+=("$f"); done
else
  for name in "$@"; do
    f="$mutant_dir/${name%.sed}.sed"
    [[ -f $f ]] || die "no mutant $f"
    mutants+=("$f")
  done
fi
((${#mutants[@]} > 0)) || die "no mutants in $mutant_dir"
total=${#mutants[@]}

# Whatever happens before the table, CI still reads a failing summary line.
summary_printed=0
on_exit() {
  local status=$?
  if ((summary_printed == 0)); then echo "mutants: 0 passed, $total failed"; fi
  if [[ ${XTGRAD_MUTANTS_KEEP:-0} != 1 && -n ${work_created:-} ]]; then
    rm -rf "$work"
  fi
  exit $status
}
trap on_exit EXIT

# --- the work directory: one run at a time ----------------------------------
mkdir -p "$(dirname "$work")"
exec 9>"$work.lock"
flock -n 9 || die "another mutation run holds $work.lock"
rm -rf "$work"
mkdir -p "$work/src" "$work/logs" "$work/pristine"
work_created=1
src="$work/src"
build="$work/build"
logs="$work/logs"
start_seconds=$SECONDS

echo "mutants.sh: copying $source_dir to $src"
if git -C "$source_dir" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  # Tracked files that still exist, plus untracked files that are not ignored.
  (cd "$source_dir" && git ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' f; do [[ -e $f || -L $f ]] && printf '%s\0' "$f"; done |
    tar --null -T - -cf -) | tar -xf - -C "$src"
else
  (cd "$source_dir" && tar --exclude='./build*' --exclude=./.git -cf - .) | tar -xf - -C "$src"
fi

# --- every mutant must still apply ------------------------------------------
# apply_mutant MUTANT FILE: applies the sed commands of MUTANT to FILE one at a
# time. Returns 1 at the first command that sed rejects or that changes
# nothing, with apply_error saying which line of MUTANT it is and why.
apply_mutant() {
  local mutant=$1 file=$2 line line_number=0 commands=0
  apply_error=""
  while IFS= read -r line || [[ -n $line ]]; do
    line_number=$((line_number + 1))
    [[ -z ${line//[[:space:]]/} || $line == \#* ]] && continue
    commands=$((commands + 1))
    cp "$file" "$work/before"
    if ! sed -i -e "$line" "$file" 2>"$work/sed.err"; then
      apply_error="sed rejects line $line_number ($(head -n 1 "$work/sed.err")):"$'\n'"    $line"
      return 1
    fi
    if cmp -s "$work/before" "$file"; then
      apply_error="line $line_number changes nothing (its pattern matches no line there):"$'\n'"    $line"
      return 1
    fi
  done <"$mutant"
  if ((commands == 0)); then
    apply_error="the mutant has no sed command"
    return 1
  fi
}

# check_applies MUTANT: returns 0 when every command of MUTANT changes a
# scratch copy of its target; otherwise says why on stderr and returns 1.
check_applies() {
  local mutant=$1 shown target problem
  shown=tests/hardening/mutants/$(basename "$1")
  target=$(sed -n '1s/^# target: *//p' "$mutant")
  if [[ -z $target ]]; then
    problem="line 1 is not '# target: FILE' naming the source file it mutates"
  elif [[ ! -f $src/$target ]]; then
    problem="its target $target (line 1) does not exist: moved, renamed or deleted?"
  else
    cp "$src/$target" "$work/scratch"
    apply_mutant "$mutant" "$work/scratch" && return 0
    problem="in $target, $apply_error"
  fi
  {
    echo "mutants.sh: the mutant $shown no longer applies to ${target:-its target}:"
    echo "  $problem"
    echo "  A mutant that does not apply tests nothing. After a refactor of ${target:-the target},"
    echo "  update $shown (its target line and its sed commands)"
    echo "  so that it plants the same mistake in the new code, or delete it if that mistake"
    echo "  can no longer be made."
  } >&2
  return 1
}

not_applying=0
for mutant in "${mutants[@]}"; do
  check_applies "$mutant" || not_applying=$((not_applying + 1))
done
if ((not_applying > 0)); then
  echo "mutants.sh: update them, or meanwhile run the others by name:" \
    "tests/hardening/mutants.sh NAME..." >&2
  die "$not_applying of $total mutants no longer apply (see above); nothing was built or run"
fi
echo "mutants.sh: all $total mutants apply to the source"

# Paths below $work are hashed relative to it: later runs hit the cache.
export CCACHE_BASEDIR="$work"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

echo "mutants.sh: configuring $build"
cmake -S "$src" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DXTGRAD_BUILD_BENCH=OFF -DXTGRAD_BUILD_DEMOS=OFF -DXTGRAD_BUILD_TESTS=ON \
  >"$logs/configure.log" 2>&1 || {
  tail -n 30 "$logs/configure.log" >&2
  die "configure failed (log above)"
}

build_targets() {  # build_targets LOG
  cmake --build "$build" -j "$jobs" --target "${targets[@]}" >"$1" 2>&1
}

# run_suite LOG_PREFIX: runs every target; sets suite_failed (0/1) and
# failed_cases (the doctest "TEST CASE:" names of the failures, or a note
# when an executable died without naming one).
run_suite() {
  local prefix=$1 exe log status cases
  suite_failed=0
  failed_cases=()
  for exe in "${targets[@]}"; do
    log="$prefix.$exe.log"
    status=0
    timeout "$run_timeout" "$build/tests/$exe" --no-colors >"$log" 2>&1 || status=$?
    ((status == 0)) && continue
    suite_failed=1
    cases=$(sed -n 's/^TEST CASE: *//p' "$log" | awk '!seen[$0]++')
    if [[ -n $cases ]]; then
      while IFS= read -r line; do failed_cases+=("$line"); done <<<"$cases"
    elif ((status == 124)); then
      failed_cases+=("($exe timed out after ${run_timeout}s)")
    else
      failed_cases+=("($exe exited with status $status, no test case named)")
    fi
  done
}

# --- the unmutated suite must pass ------------------------------------------
echo "mutants.sh: building ${targets[*]} (unmutated)"
build_targets "$logs/baseline.build.log" || {
  tail -n 40 "$logs/baseline.build.log" >&2
  die "the unmutated tree does not build (log above)"
}
run_suite "$logs/baseline"
if ((suite_failed)); then
  printf '  failing: %s\n' "${failed_cases[@]}" >&2
  die "the unmutated suite fails: a mutation check means nothing until it passes"
fi
echo "mutants.sh: unmutated suite passes ($((SECONDS - start_seconds)) s so far)"

# --- the mutants -------------------------------------------------------------
names=()
verdicts=()
details=()
passed=0
failed=0
for mutant in "${mutants[@]}"; do
  name=$(basename "$mutant" .sed)
  mutant_start=$SECONDS
  target=$(sed -n '1s/^# target: *//p' "$mutant")
  verdict=""
  cases_text=""
  if [[ -z $target || ! -f $src/$target ]]; then  # checked before the build; kept for safety
    verdict="NOT APPLIED"
    cases_text="line 1 must be '# target: FILE' naming an existing file (got '$target')"
  else
    pristine="$work/pristine/$name"
    cp "$src/$target" "$pristine"
    # Every command must change the file, each on its own: a pattern that no
    # longer matches the source would otherwise leave a half-applied mutant.
    if ! apply_mutant "$mutant" "$src/$target"; then
      verdict="NOT APPLIED"
      cases_text="in $target, ${apply_error//$'\n'/ }"
    fi
    if [[ -z $verdict ]]; then
      diff -u "$pristine" "$src/$target" >"$logs/$name.diff" || true
      if ! build_targets "$logs/$name.build.log"; then
        verdict="NO BUILD"
        cases_text="the mutated tree does not compile (log: $logs/$name.build.log with XTGRAD_MUTANTS_KEEP=1)"
        grep -m 3 'error' "$logs/$name.build.log" >&2 || true
      else
        run_suite "$logs/$name"
        if ((suite_failed)); then
          verdict="yes"
          cases_text=$(printf '%s\n' "${failed_cases[@]}")
        else
          verdict="no"
          cases_text="(every test passes: the mutant survives)"
        fi
      fi
    fi
    # Restore; a fresh mtime so that the next build recompiles the file.
    cp "$pristine" "$src/$target"
    touch "$src/$target"
  fi
  [[ $verdict == yes ]] && passed=$((passed + 1)) || failed=$((failed + 1))
  names+=("$name")
  verdicts+=("$verdict")
  details+=("$cases_text")
  echo "mutants.sh: $name: killed = $verdict ($((SECONDS - mutant_start)) s)"
done

# --- report -----------------------------------------------------------------
echo
printf '%-28s %-12s %-6s %s\n' "mutant" "killed" "cases" "killing test cases (first 3)"
printf '%-28s %-12s %-6s %s\n' "------" "------" "-----" "----------------------------"
for i in "${!names[@]}"; do
  count=0
  first=""
  if [[ ${verdicts[$i]} == yes ]]; then
    count=$(printf '%s\n' "${details[$i]}" | grep -c .)
    first=$(printf '%s\n' "${details[$i]}" | awk 'NR <= 3 { printf "%s%s", (NR > 1 ? "; " : ""), $0 }')
  else
    count="-"
    first=${details[$i]}
  fi
  printf '%-28s %-12s %-6s %s\n' "${names[$i]}" "${verdicts[$i]}" "$count" "$first"
done
echo
for i in "${!names[@]}"; do
  [[ ${verdicts[$i]} == yes ]] || continue
  echo "${names[$i]}: every failing test case"
  printf '%s\n' "${details[$i]}" | sed 's/^/    /'
done
echo "mutants.sh: $((SECONDS - start_seconds)) s in all"
echo "mutants: $passed passed, $failed failed"
summary_printed=1
((failed == 0))
